//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package catalog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
)

// The catalog is only ever a cache: whatever happens to its file, each
// lookup serves the value put, or misses, and the process lives on. These
// tests damage a real catalog file the ways a host does (a disk that fills,
// a partial copy, flipped bits, processes killed mid-write, several
// processes at once) and check every lookup.

// TestMain runs the helper processes of the tests below when the test
// binary is started as one (helperRole set).
func TestMain(m *testing.M) {
	if role := os.Getenv(helperRole); role != "" {
		if err := helper(role, os.Getenv(helperPath)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	helperRole = "CATALOG_TEST_HELPER"
	helperPath = "CATALOG_TEST_PATH"
)

// contents is what a test catalog holds.
type contents struct {
	entries map[string][]byte
	names   map[string]string
}

// value is the deterministic value of entry i: sizes from a few bytes to
// more than a page, so that some values take overflow pages.
func value(i int) []byte {
	n := 8 + (i*397)%500
	if i%29 == 0 {
		n = 6000
	}
	return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, n/3+1)[:n]
}

func entryKey(i int) string {
	return fmt.Sprintf("footer\x00s3://bkt/data/part-%05d.parquet\x00%d\x00%d\x00\"etag-%d\"", i, 1000+i, 1700000000000000000+i, i)
}

// build writes a catalog of about 64 KiB as a host's would be, names and
// footers written a batch at a time, in dir/built.db, and returns what it
// holds and the file's bytes.
func build(t *testing.T, dir string) (contents, []byte) {
	t.Helper()
	path := filepath.Join(dir, "built.db")
	c := catalog.Open(catalog.Options{Path: path})
	want := contents{entries: map[string][]byte{}, names: map[string]string{}}
	for batch := range 6 {
		var keys []string
		var values [][]byte
		for i := batch * 10; i < batch*10+10; i++ {
			keys, values = append(keys, entryKey(i)), append(values, value(i))
			want.entries[entryKey(i)] = value(i)
		}
		c.Put(keys, values)
		name := fmt.Sprintf("table-%d", batch)
		want.names[name] = "s3://bkt/" + name
		if err := c.Register(name, want.names[name]); err != nil {
			t.Fatal(err)
		}
	}
	if got := check(t, c, want); got != len(want.entries) {
		t.Fatalf("the catalog built serves %d of %d entries", got, len(want.entries))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return want, data
}

// check asks c for every entry and name of want, failing on any answer that
// is not the one put (a miss is fine), and returns the number of entries
// served.
func check(t *testing.T, c *catalog.Catalog, want contents) int {
	t.Helper()
	keys := make([]string, 0, len(want.entries))
	for k := range want.entries {
		keys = append(keys, k)
	}
	hits := 0
	for i, v := range c.Get(keys) {
		switch {
		case v == nil:
		case !bytes.Equal(v, want.entries[keys[i]]):
			t.Fatalf("entry %q: served %d bytes that are not the %d put", keys[i], len(v), len(want.entries[keys[i]]))
		default:
			hits++
		}
	}
	names, err := c.Names()
	if err != nil {
		t.Fatalf("names: %v", err)
	}
	for name, uri := range names {
		if want.names[name] != uri {
			t.Fatalf("names: %q → %q, registered %q", name, uri, want.names[name])
		}
	}
	for _, name := range []string{"table-0", "table-5"} {
		uri := want.names[name]
		got, err := c.Lookup(name)
		if err != nil && errcode.Of(err) != errcode.NotFound || err == nil && got != uri {
			t.Fatalf("lookup %q = %q, %v; registered %q", name, got, err, uri)
		}
	}
	return hits
}

// works checks that c, after whatever happened to its file, keeps what is
// put in it from now on.
func works(t *testing.T, c *catalog.Catalog) {
	t.Helper()
	c.Put([]string{"after"}, [][]byte{[]byte("the damage")})
	if got := c.Get([]string{"after"}); string(got[0]) != "the damage" {
		t.Fatalf("after the damage the catalog serves %q", got[0])
	}
	if err := c.Register("later", "file:///later"); err != nil {
		t.Fatal(err)
	}
	if uri, err := c.Lookup("later"); err != nil || uri != "file:///later" {
		t.Fatalf("lookup after the damage = %q, %v", uri, err)
	}
}

// layout reads the page size and the high-water mark (the first page not in
// use) from the meta pages of a bbolt file: the meta of the later
// transaction.
func layout(t *testing.T, data []byte) (pageSize, highWater int) {
	t.Helper()
	meta := data[16:]
	pageSize = int(binary.NativeEndian.Uint32(meta[8:]))
	if pageSize < 1024 || len(data)%pageSize != 0 {
		t.Fatalf("page size %d of a %d-byte file", pageSize, len(data))
	}
	if other := data[pageSize+16:]; binary.NativeEndian.Uint64(other[48:]) > binary.NativeEndian.Uint64(meta[48:]) {
		meta = other
	}
	return pageSize, int(binary.NativeEndian.Uint64(meta[40:]))
}

// damaged replays one damaged copy of a catalog: data is written to a new
// file and read through a catalog, which is then used (works) when try is
// set or when the damage went unnoticed but cost entries.
func damaged(t *testing.T, dir string, data []byte, want contents, try bool) (hits int, aside bool) {
	t.Helper()
	path := filepath.Join(dir, "catalog.db")
	for _, p := range append(setAside(t, path), path) {
		os.Remove(p)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := catalog.Open(catalog.Options{Path: path, Timeout: time.Minute})
	hits = check(t, c, want)
	aside = len(setAside(t, path)) > 0
	if hits < len(want.entries) && !aside || try {
		works(t, c)
	}
	return hits, aside
}

// TestTruncatedCatalog cuts a real catalog file at every page boundary and
// at odd offsets: every cut is served right or missed, never a fault (bbolt
// maps the file: a page past its end is a SIGBUS), and a cut file is set
// aside, not read twice. The timeout of a minute for the lock would show
// as a dropped Put (works) if a fault left the file locked.
func TestTruncatedCatalog(t *testing.T) {
	dir := t.TempDir()
	want, data := build(t, dir)
	ps, hw := layout(t, data)
	cuts := []int{1, 15, 100, ps - 1, ps + 17, 2*ps + 1, 3*ps - 8, hw * ps / 3, hw*ps - 1, len(data) - 1}
	for off := 0; off <= len(data); off += ps {
		cuts = append(cuts, off)
	}
	for _, off := range cuts {
		hits, aside := damaged(t, dir, data[:off], want, true)
		switch {
		case off >= hw*ps && (aside || hits != len(want.entries)):
			// bbolt allocates pages ahead: those past the high-water mark
			// hold nothing yet.
			t.Errorf("cut at %d past the %d pages in use: %d of %d hits, set aside %v", off, hw, hits, len(want.entries), aside)
		case off > 0 && off < hw*ps && !aside:
			t.Errorf("cut at %d of the %d bytes in use: not set aside (%d hits)", off, hw*ps, hits)
		}
	}
	t.Logf("%d cuts of a %d-byte catalog of %d-byte pages, %d in use", len(cuts), len(data), ps, hw)
}

// TestBitFlippedCatalog flips bits of a real catalog file: every bit of
// the low bytes of the page headers' fields, every fifth of both meta
// records, every bit of the low bytes of branch pages' child pointers and
// of the first leaf's first two elements (where a flip sends bbolt off the
// page, past the file, or back up the tree), and bits at random across the
// whole file. Each copy serves each entry right or misses it, and the
// catalog works after.
func TestBitFlippedCatalog(t *testing.T) {
	dir := t.TempDir()
	want, data := build(t, dir)
	ps, hw := layout(t, data)
	var bits []int // bit offsets
	span := func(from, n, step int) {
		for b := from * 8; b < (from+n)*8; b += step {
			bits = append(bits, b)
		}
	}
	leafDone := false
	for p := range hw {
		off := p * ps
		span(off, 1, 1)    // the low bits of the page's id,
		span(off+8, 1, 1)  // of its flags,
		span(off+10, 3, 1) // its count and the low bits of its overflow
		count := int(binary.NativeEndian.Uint16(data[off+10:]))
		switch binary.NativeEndian.Uint16(data[off+8:]) {
		case 0x04: // meta: its checksum makes every flip alike
			span(off+16, 64, 5)
		case 0x01: // branch: the low bits of each element's child page id
			for e := range count {
				span(off+16+e*16+8, 2, 1)
			}
		case 0x02: // leaf: the first two elements of the first leaf
			if !leafDone && count > 1 {
				span(off+16, 32, 1)
				leafDone = true
			}
		}
	}
	targeted := len(bits)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 600 {
		bits = append(bits, rng.IntN(len(data)*8))
	}
	var missed, setAside int
	for i, b := range bits {
		flipped := bytes.Clone(data)
		flipped[b/8] ^= 1 << (b % 8)
		hits, aside := damaged(t, dir, flipped, want, i%64 == 0)
		if hits < len(want.entries) {
			missed++
		}
		if aside {
			setAside++
		}
	}
	t.Logf("%d targeted and %d random flips of a %d-byte catalog: %d set aside, %d with misses",
		targeted, len(bits)-targeted, len(data), setAside, missed)
}

// TestFlippedEntryIsAMiss flips one bit in the value of a cached entry, as
// a bad disk would: the entry is never served; the file is set aside.
func TestFlippedEntryIsAMiss(t *testing.T) {
	dir := t.TempDir()
	want, data := build(t, dir)
	v := value(21)
	at := bytes.Index(data, v)
	if at < 0 {
		t.Fatal("value not found in the file")
	}
	data[at+len(v)/2] ^= 0x10
	hits, aside := damaged(t, dir, data, want, true)
	if !aside || hits == len(want.entries) {
		t.Fatalf("flipped entry: %d hits, set aside %v", hits, aside)
	}
}

// TestConcurrentProcesses runs ranks as separate processes on one catalog
// file, registering, putting and looking up at once, first on a sound file
// (every name registered is there at the end), then while the file is cut
// and overwritten with garbage between their transactions: no rank crashes
// or is served a wrong answer, and the catalog works after.
func TestConcurrentProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	const ranks = 4
	run := func(damage func()) {
		t.Helper()
		cmds := make([]*exec.Cmd, ranks)
		outs := make([]*bytes.Buffer, ranks)
		for r := range ranks {
			cmds[r], outs[r] = start(t, "rank"+strconv.Itoa(r), path)
		}
		if damage != nil {
			damage()
		}
		for r, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Errorf("rank %d: %v\n%s", r, err, outs[r])
			}
		}
	}
	run(nil)
	names, err := catalog.Open(catalog.Options{Path: path}).Names()
	if err != nil || len(names) != ranks*rankRounds {
		t.Fatalf("after the ranks: %d names, %v; want %d", len(names), err, ranks*rankRounds)
	}
	run(func() {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		for i := range 20 {
			betweenTransactions(t, path, func() {
				if i%2 == 0 {
					os.Truncate(path, int64(len(data)/3))
				} else {
					os.WriteFile(path, bytes.Repeat([]byte("garbage!"), len(data)/8), 0o644)
				}
			})
			time.Sleep(5 * time.Millisecond)
		}
	})
	works(t, catalog.Open(catalog.Options{Path: path}))
}

// betweenTransactions damages the file at path holding the lock that
// bbolt's writers hold: the damage falls between two transactions, as a
// disk's does to a file at rest. A program that writes the file without the
// lock while a transaction has it mapped is not defended against: bbolt
// would read pages changing under it.
func betweenTransactions(t *testing.T, path string, damage func()) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return // set aside, not created anew yet
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	damage()
}

// rankRounds is the number of names each rank registers.
const rankRounds = 20

// TestWriterKilledMidWrite kills a process with SIGKILL while it writes
// the catalog, again and again: every entry it had read back before the
// kill is there, no other is wrong, and the file is never damaged (bbolt
// writes its meta page last).
func TestWriterKilledMidWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	c := catalog.Open(catalog.Options{Path: path, Timeout: time.Minute})
	for round := range 6 {
		cmd, stdout := startPiped(t, "writer", path)
		lines := bufio.NewScanner(stdout)
		done := map[int]bool{}
		for len(done) < 3+round*7 && lines.Scan() {
			i, err := strconv.Atoi(lines.Text())
			if err != nil {
				t.Fatalf("writer said %q", lines.Text())
			}
			done[i] = true
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		keys := make([]string, writerEntries)
		for i := range keys {
			keys[i] = entryKey(i)
		}
		for i, v := range c.Get(keys) {
			switch {
			case v != nil && !bytes.Equal(v, writerValue(i)):
				t.Fatalf("round %d: entry %d is wrong", round, i)
			case v == nil && done[i]:
				t.Fatalf("round %d: entry %d, read back before the kill, is gone", round, i)
			}
		}
		if aside := setAside(t, path); len(aside) != 0 {
			t.Fatalf("round %d: the kill damaged the file: %v", round, aside)
		}
	}
	works(t, c)
}

const writerEntries = 400

func writerValue(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 500+(i*7919)%20000) }

// start starts the test binary as the helper role on path.
func start(t *testing.T, role, path string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	cmd := helperCmd(t, role, path)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// startPiped starts the helper with its standard output to read.
func startPiped(t *testing.T, role, path string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := helperCmd(t, role, path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stdout
}

// helperCmd is the test binary as a helper process, killed after two
// minutes: a helper that hangs fails its test instead of stalling it.
func helperCmd(t *testing.T, role, path string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperRole+"="+role, helperPath+"="+path)
	return cmd
}

// helper is the body of a helper process.
func helper(role, path string) error {
	c := catalog.Open(catalog.Options{Path: path, Timeout: time.Minute})
	if role == "writer" {
		// Puts entries in batches, and prints each entry's number once it
		// is read back, until killed.
		for i := 0; ; i = (i + 1) % writerEntries {
			keys := []string{entryKey(i), entryKey((i + 1) % writerEntries)}
			c.Put(keys, [][]byte{writerValue(i), writerValue((i + 1) % writerEntries)})
			if got := c.Get(keys[:1]); bytes.Equal(got[0], writerValue(i)) {
				fmt.Println(i)
			}
		}
	}
	rank, _ := strings.CutPrefix(role, "rank")
	for i := range rankRounds {
		name := fmt.Sprintf("r%s-%d", rank, i)
		uri := "file:///data/" + name
		// A file damaged again as soon as it was started anew fails a
		// Register with Corrupt (the test's sound phase counts the names).
		if err := c.Register(name, uri); err != nil && errcode.Of(err) != errcode.Corrupt {
			return fmt.Errorf("register %s: %w", name, err)
		}
		got, err := c.Lookup(name)
		if err != nil && errcode.Of(err) != errcode.NotFound && errcode.Of(err) != errcode.Corrupt || err == nil && got != uri {
			return fmt.Errorf("lookup %s = %q, %v", name, got, err)
		}
		keys := []string{entryKey(i), name}
		c.Put(keys, [][]byte{value(i), []byte(uri)})
		for j, v := range c.Get(keys) {
			if v != nil && !bytes.Equal(v, [][]byte{value(i), []byte(uri)}[j]) {
				return fmt.Errorf("get %q: a wrong value", keys[j])
			}
		}
	}
	return nil
}
