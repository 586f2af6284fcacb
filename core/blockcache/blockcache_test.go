package blockcache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/s3"
	"github.com/croupier-data/croupier/internal/s3test"
)

const bs = blockcache.BlockSize

// Environment of the child processes the tests start (see TestMain).
const (
	envChild     = "CROUPIER_BLOCKCACHE_CHILD" // "write" or "share"
	envDir       = "CROUPIER_BLOCKCACHE_DIR"   // the cache folder
	envSignal    = "CROUPIER_BLOCKCACHE_SIGNAL"
	envURI       = "CROUPIER_BLOCKCACHE_URI"
	envObject    = "CROUPIER_BLOCKCACHE_OBJECT"    // a store.Object, in JSON
	envBlockwise = "CROUPIER_BLOCKCACHE_BLOCKWISE" // read a block at a time
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "write":
		writeUntilKilled(os.Getenv(envDir), os.Getenv(envSignal))
	case "share":
		os.Exit(readShared())
	}
	os.Exit(m.Run())
}

// content returns the n bytes of the object called name.
func content(name string, n int64) []byte {
	seed := sha256.Sum256([]byte(name))
	r := rand.New(rand.NewChaCha8(seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// source is a store of one object that counts its requests.
type source struct {
	data     []byte
	requests atomic.Int64
	bytes    atomic.Int64
}

func (s *source) fetch(ctx context.Context, off int64, bufs [][]byte) error {
	s.requests.Add(1)
	for _, b := range bufs {
		n := copy(b, s.data[off:])
		off += int64(n)
		s.bytes.Add(int64(n))
	}
	return nil
}

func open(t testing.TB, dir string, maxBytes int64) *blockcache.Cache {
	t.Helper()
	c, err := blockcache.Open(blockcache.Options{Dir: dir, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check reads [off, off+n) of obj through c and checks the bytes.
func check(t *testing.T, c *blockcache.Cache, obj blockcache.Object, src *source, off, n int64) blockcache.Stats {
	t.Helper()
	p := make([]byte, n)
	st, err := c.ReadAt(context.Background(), obj, p, off, src.fetch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, src.data[off:off+n]) {
		t.Fatalf("read [%d, +%d) of %s: wrong bytes", off, n, obj.ID)
	}
	return st
}

// TestReadsAreServedFromBlocks reads ranges of an object whose last block is
// short: the first reads fetch the blocks they cover, consecutive missing
// blocks in one request, and the same reads again fetch nothing.
func TestReadsAreServedFromBlocks(t *testing.T) {
	c := open(t, t.TempDir(), 0)
	size := int64(5*bs + 1000)
	src := &source{data: content("blocks", size)}
	obj := blockcache.Object{ID: "blocks", Size: size}
	ranges := [][2]int64{{10, 100}, {bs - 5, 10}, {3*bs + 7, bs + 500}, {size - 1, 1}, {0, size}}
	for _, r := range ranges {
		check(t, c, obj, src, r[0], r[1])
	}
	// Blocks 0, 1, 3 and 4 together, 5, then 2.
	if got := src.requests.Load(); got != 5 {
		t.Errorf("%d requests; want 5", got)
	}
	if got := src.bytes.Load(); got != size {
		t.Errorf("%d bytes fetched; want the object's %d, each block once", got, size)
	}
	src.requests.Store(0)
	for _, r := range ranges {
		if st := check(t, c, obj, src, r[0], r[1]); st.Hits == 0 || st.Misses != 0 || st.HitBytes != r[1] {
			t.Errorf("read [%d, +%d) again: %+v; want hits only", r[0], r[1], st)
		}
	}
	if got := src.requests.Load(); got != 0 {
		t.Errorf("%d requests reading again; want 0", got)
	}
}

// TestCanceledReadLeavesNoLock reads missing blocks with a context canceled
// before the read: the locks are taken at once (no process holds them) and
// must be let go with the error, and no file is left open but the folder's
// lock file, which a read that stored a block opened before.
func TestCanceledReadLeavesNoLock(t *testing.T) {
	c := open(t, t.TempDir(), 0)
	size := int64(3 * bs)
	src := &source{data: content("canceled", size)}
	obj := blockcache.Object{ID: "canceled", Size: size}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	check(t, c, blockcache.Object{ID: "first", Size: 10}, &source{data: content("first", 10)}, 0, 10)
	before := fds()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.ReadAt(ctx, obj, make([]byte, size), 0, src.fetch); errcode.Of(err) != errcode.Canceled {
		t.Fatalf("read with a canceled context: %v; want Canceled", err)
	}
	for b := range int64(3) {
		if !c.Free(obj.ID, b) {
			t.Errorf("block %d: lock still held", b)
		}
	}
	if after := fds(); after > before {
		t.Errorf("%d file descriptors open after the read, %d before", after, before)
	}
	check(t, c, obj, src, 0, size) // and the blocks are fetched after
}

// TestReadsOfAProcessFetchABlockOnce has eight reads of one process, through
// two Caches of one folder, miss the same blocks at once: the first fetches
// them, while the others wait for it and are served from disk. Whatever
// order they come in, the object is fetched once.
func TestReadsOfAProcessFetchABlockOnce(t *testing.T) {
	dir := t.TempDir()
	caches := []*blockcache.Cache{open(t, dir, 0), open(t, dir, 0)}
	size := int64(3*bs + 5)
	obj := blockcache.Object{ID: "shared", Size: size}
	src := &source{data: content("shared", size)}
	var started atomic.Int64
	const reads = 8
	fetch := func(ctx context.Context, off int64, bufs [][]byte) error {
		for started.Load() < reads { // the others are on their way
			runtime.Gosched()
		}
		time.Sleep(10 * time.Millisecond) // and most of them waiting: no assertion depends on it
		return src.fetch(ctx, off, bufs)
	}
	var wg sync.WaitGroup
	for i := range reads {
		wg.Go(func() {
			p := make([]byte, size)
			started.Add(1)
			if _, err := caches[i%2].ReadAt(context.Background(), obj, p, 0, fetch); err != nil {
				t.Error(err)
			} else if !bytes.Equal(p, src.data) {
				t.Error("wrong bytes")
			}
		})
	}
	wg.Wait()
	if got := src.requests.Load(); got != 1 {
		t.Errorf("%d requests for the object; want 1", got)
	}
	if got := src.bytes.Load(); got != size {
		t.Errorf("%d bytes fetched; want the object's %d once", got, size)
	}
}

// TestDamagedRecordIsAMiss damages a segment every way (each byte of a
// record's header flipped, some of its bytes, the segment cut at every
// length of the header and some of the bytes, as a writer killed mid-append
// leaves it, another block's or another object's record in its place): a
// cache opened on the damaged folder returns the object's bytes, the
// damaged block fetched again.
func TestDamagedRecordIsAMiss(t *testing.T) {
	size := int64(2*bs + 100)
	src := &source{data: content("damaged", size)}
	obj := blockcache.Object{ID: "damaged", Size: size}
	base := t.TempDir()
	c := open(t, base, 0)
	check(t, c, obj, src, 0, size) // one request: the three blocks appended in order
	other := &source{data: content("other", size)}
	check(t, c, blockcache.Object{ID: "other", Size: size}, other, 0, size)
	segs := blockcache.Segments(base)
	if len(segs) != 1 {
		t.Fatalf("%d segments; want 1", len(segs))
	}
	good, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	rec := int(blockcache.HeaderSize + bs)
	if want := 4*rec + 2*(blockcache.HeaderSize+100); len(good) != want {
		t.Fatalf("the segment holds %d bytes; want six records, %d", len(good), want)
	}
	damage := func(what string, b int64, bad []byte) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(segs[0])), bad, 0o644); err != nil {
			t.Fatal(err)
		}
		before := src.requests.Load()
		st := check(t, open(t, dir, 0), obj, src, b*bs, min(bs, size-b*bs))
		if src.requests.Load() != before+1 || st.Misses != 1 {
			t.Fatalf("%s: block %d served from disk (%+v)", what, b, st)
		}
	}
	for b := range 3 {
		start, n := b*rec, min(bs, int(size)-b*bs)
		at := []int{}
		for i := range blockcache.HeaderSize {
			at = append(at, i)
		}
		at = append(at, blockcache.HeaderSize, blockcache.HeaderSize+1, blockcache.HeaderSize+n/2, blockcache.HeaderSize+n-1)
		for _, i := range at {
			bad := slices.Clone(good)
			bad[start+i] ^= 0xff
			damage(fmt.Sprintf("byte %d of record %d flipped", i, b), int64(b), bad)
		}
		for _, i := range append(at[:blockcache.HeaderSize:blockcache.HeaderSize], blockcache.HeaderSize, blockcache.HeaderSize+n/2, blockcache.HeaderSize+n-1) {
			damage(fmt.Sprintf("cut within record %d, after %d bytes", b, i), int64(b), good[:start+i])
		}
	}
	swapped := slices.Clone(good)
	copy(swapped[rec:2*rec], good[:rec])
	damage("block 0 in block 1's place", 1, swapped)
	swapped = slices.Clone(good)
	copy(swapped[rec:2*rec], good[3*rec+blockcache.HeaderSize+100:])
	damage("another object's block 1 in its place", 1, swapped)
}

// TestChangedObjectIsNotServed rewrites an object on the S3 test server under
// its key, as many bytes and with the same Last-Modified: a read of the new
// version returns its bytes, never the cached blocks of the old one, which
// still serve reads of the version they belong to.
func TestChangedObjectIsNotServed(t *testing.T) {
	ctx := context.Background()
	srv := startS3(t)
	loc := openS3(t, srv, t.TempDir())
	size := int64(3*bs + 17)
	old, new := content("v1", size), content("v2", size)
	if err := srv.Put("bkt", "obj", old); err != nil {
		t.Fatal(err)
	}
	v1, err := loc.Stat(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	readS3(t, loc, v1, old)
	if err := srv.Overwrite("bkt", "obj", new); err != nil {
		t.Fatal(err)
	}
	v2, err := loc.Stat(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	if v2.ETag == v1.ETag || !v2.ModTime.Equal(v1.ModTime) || v2.Size != v1.Size {
		t.Fatalf("the rewrite changed %s to %s; want another ETag only", v1, v2)
	}
	srv.ResetCounts()
	readS3(t, loc, v2, new)
	if got := srv.BytesServed(); got != size {
		t.Errorf("the store served %d bytes of the new version; want all %d", got, size)
	}
	srv.ResetCounts()
	readS3(t, loc, v1, old)
	if got := srv.Requests(); got != 0 {
		t.Errorf("%d requests reading the old version again; want 0", got)
	}
}

func startS3(t *testing.T) *s3test.Server {
	t.Helper()
	srv, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func openS3(t *testing.T, srv *s3test.Server, dir string) *store.Location {
	t.Helper()
	loc, err := store.Open(context.Background(), srv.URI("bkt", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loc.Close() })
	loc.Cache = open(t, dir, 0)
	return loc
}

// readS3 reads obj whole through loc and checks its bytes.
func readS3(t *testing.T, loc *store.Location, obj store.Object, want []byte) {
	t.Helper()
	p := make([]byte, obj.Size)
	if _, err := loc.NewReaderAt(context.Background(), obj).ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, want) {
		t.Fatalf("read %s (%s): wrong bytes", obj.Key, obj)
	}
}

// TestProcessesFetchABlockOnce has two processes read the same object at the
// same moment through one cache folder, from the S3 test server answering
// each request after 300 ms: the store serves the object's bytes once.
func TestProcessesFetchABlockOnce(t *testing.T) {
	ctx := context.Background()
	srv := startS3(t)
	size := int64(6*bs + 1234)
	if err := srv.Put("bkt", "shared", content("shared", size)); err != nil {
		t.Fatal(err)
	}
	loc, err := store.Open(ctx, srv.URI("bkt", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	obj, err := loc.Stat(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(obj)
	dir, start := t.TempDir(), filepath.Join(t.TempDir(), "start")
	srv.SetFaults(s3test.Faults{FirstByte: 300 * time.Millisecond})
	srv.ResetCounts()
	env := []string{envChild + "=share", envDir + "=" + dir, envSignal + "=" + start,
		envURI + "=" + srv.URI("bkt", ""), envObject + "=" + string(js)}
	runChildren(t, start, env, env)
	if got := srv.BytesServed(); got != size {
		t.Errorf("the store served %d bytes in %d requests; want the object's %d once", got, srv.Requests(), size)
	}
}

// TestProcessesAppendApart has two processes store 48 blocks each, of
// two objects, at the same moment, through one cache folder: the segments
// hold the 96 records whole, none twice, and a third process reads both
// objects from them without a request.
func TestProcessesAppendApart(t *testing.T) {
	ctx := context.Background()
	srv := startS3(t)
	size := int64(48 * bs)
	dir, start := t.TempDir(), filepath.Join(t.TempDir(), "start")
	loc := openS3(t, srv, dir)
	var envs [][]string
	var objs []store.Object
	for _, name := range []string{"left", "right"} {
		if err := srv.Put("bkt", name, content(name, size)); err != nil {
			t.Fatal(err)
		}
		obj, err := loc.Stat(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
		js, _ := json.Marshal(obj)
		envs = append(envs, []string{envChild + "=share", envDir + "=" + dir, envSignal + "=" + start,
			envURI + "=" + srv.URI("bkt", ""), envObject + "=" + string(js), envBlockwise + "=1"})
	}
	runChildren(t, start, envs...)
	for _, seg := range blockcache.Segments(dir) {
		if n, tail, _, err := blockcache.Records(seg); err != nil || tail != 0 {
			t.Errorf("segment %s: %d records, then %d bytes that are not (%v)", seg, n, tail, err)
		}
	}
	if got := records(t, dir); got != 96 {
		t.Errorf("%d records; want 96", got)
	}
	srv.ResetCounts()
	for i, obj := range objs {
		readS3(t, loc, obj, content([]string{"left", "right"}[i], size))
	}
	if got := srv.Requests(); got != 0 {
		t.Errorf("%d requests reading the objects from the cache; want 0", got)
	}
}

// readShared is a child of TestProcessesFetchABlockOnce: it waits for the
// start file, then reads the object whole through the cache.
func readShared() int {
	ctx := context.Background()
	var obj store.Object
	if err := json.Unmarshal([]byte(os.Getenv(envObject)), &obj); err != nil {
		fmt.Println(err)
		return 1
	}
	loc, err := store.Open(ctx, os.Getenv(envURI))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer loc.Close()
	if loc.Cache, err = blockcache.Open(blockcache.Options{Dir: os.Getenv(envDir)}); err != nil {
		fmt.Println(err)
		return 1
	}
	for {
		if _, err := os.Stat(os.Getenv(envSignal)); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p := make([]byte, obj.Size)
	step := obj.Size
	if os.Getenv(envBlockwise) != "" {
		step = bs
	}
	r := loc.NewReaderAt(ctx, obj)
	for off := int64(0); off < obj.Size; off += step {
		if _, err := r.ReadAt(p[off:min(off+step, obj.Size)], off); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	if !bytes.Equal(p, content(obj.Key, obj.Size)) {
		fmt.Println("wrong bytes")
		return 1
	}
	return 0
}

// Objects the killed writer stores: "object 0", "object 1", …, each of
// writtenSize bytes; and "hung", whose fetch never ends.
const writtenSize = 4*bs + 7

// TestKilledWriter kills a process with SIGKILL while it stores blocks, one
// of its fetches holding the locks of its blocks, and cuts the last record
// of one of its segments, as a kill in the middle of an append leaves it:
// the locks it held are free, every object reads its own bytes, and every
// whole record it left is served, the cut one fetched again.
func TestKilledWriter(t *testing.T) {
	dir := t.TempDir()
	hung := filepath.Join(t.TempDir(), "hung")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=write", envDir+"="+dir, envSignal+"="+hung)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(hung); err == nil && records(t, dir) >= 64 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the writer stored no blocks in a minute:\n%s", out)
		}
	}
	cmd.Process.Kill()
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer not killed: %v\n%s", err, out)
	}
	seg := blockcache.Segments(dir)[0]
	n, tail, _, err := blockcache.Records(seg)
	if err != nil || n == 0 {
		t.Fatalf("segment %s: %d records (%v)", seg, n, err)
	}
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-tail-1000); err != nil { // its last whole record torn
		t.Fatal(err)
	}
	whole := records(t, dir)

	c := open(t, dir, 0)
	for b := range int64(4) {
		if !c.Free("hung", b) {
			t.Errorf("the lock of block %d the writer held is not free", b)
		}
	}
	var hits int64
	for i := range whole + 8 { // more objects than it began
		id := "object " + strconv.Itoa(i)
		hits += check(t, c, blockcache.Object{ID: id, Size: writtenSize}, &source{data: content(id, writtenSize)}, 0, writtenSize).Hits
	}
	if hits != int64(whole) {
		t.Errorf("%d blocks served from disk; want the %d whole records", hits, whole)
	}
}

// records returns the whole records in the segments of dir.
func records(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, seg := range blockcache.Segments(dir) {
		k, _, _, err := blockcache.Records(seg)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}

// writeUntilKilled is the child of TestKilledWriter: it fetches the blocks
// of "hung" without end, holding their locks, and once it does, stores
// objects until it is killed, creating the file signal when both are under
// way.
func writeUntilKilled(dir, signal string) {
	ctx := context.Background()
	c, err := blockcache.Open(blockcache.Options{Dir: dir, MaxBytes: 1 << 40})
	if err != nil {
		panic(err)
	}
	go c.ReadAt(ctx, blockcache.Object{ID: "hung", Size: 4 * bs}, make([]byte, 4*bs), 0, func(context.Context, int64, [][]byte) error {
		os.WriteFile(signal, nil, 0o644)
		select {}
	})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i += 4 {
				id := "object " + strconv.Itoa(i)
				src := &source{data: content(id, writtenSize)}
				if _, err := c.ReadAt(ctx, blockcache.Object{ID: id, Size: writtenSize}, make([]byte, writtenSize), 0, src.fetch); err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
}

// TestEvictionLeastRecentlyUsed bounds a cache to four blocks, a segment
// each, and reads a fifth and sixth after a hit on the oldest: each sweep
// keeps the folder within the bound, deleting the least recently used
// segment.
func TestEvictionLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	file := int64(2*blockcache.HeaderSize + bs) // a record and the seal after it
	c := open(t, dir, 4*file)
	size := int64(8 * bs)
	src := &source{data: content("evicted", size)}
	obj := blockcache.Object{ID: "evicted", Size: size}
	for b := range int64(4) {
		check(t, c, obj, src, b*bs, 1)
	}
	// Blocks used an hour ago, 0 first, then 0 again now.
	for b := range int64(4) {
		used := time.Now().Add(-time.Hour + time.Duration(b)*time.Minute)
		path, _, ok := c.Record(obj.ID, b)
		if !ok {
			t.Fatalf("block %d not on disk", b)
		}
		if err := os.Chtimes(path, used, used); err != nil {
			t.Fatal(err)
		}
	}
	c = open(t, dir, 4*file) // which reads the times of the segments
	check(t, c, obj, src, 0, 1)
	present := func() []int64 {
		var out []int64
		for b := range int64(8) {
			if _, _, ok := c.Record(obj.ID, b); ok {
				out = append(out, b)
			}
		}
		var total int64
		for _, seg := range blockcache.Segments(dir) {
			if fi, err := os.Stat(seg); err == nil {
				total += fi.Size()
			}
		}
		if total > 4*file {
			t.Errorf("the folder holds %d bytes of segments; the bound is %d", total, 4*file)
		}
		return out
	}
	check(t, c, obj, src, 4*bs, 1)
	if got := present(); !slices.Equal(got, []int64{0, 2, 3, 4}) {
		t.Errorf("blocks %v on disk; want 0, 2, 3, 4 (1 the least recently used)", got)
	}
	check(t, c, obj, src, 5*bs, 1)
	if got := present(); !slices.Equal(got, []int64{0, 3, 4, 5}) {
		t.Errorf("blocks %v on disk; want 0, 3, 4, 5", got)
	}
	if got := c.Stats().Evicted; got != 2 {
		t.Errorf("%d segments evicted; want 2", got)
	}
}

// TestIdleWriterSeals has a writer store a block, go idle (for longer than
// no time at all), and store another: the second starts a new segment, the
// first sealed, and another cache reads both from disk.
func TestIdleWriterSeals(t *testing.T) {
	blockcache.SetIdleAge(t, 0)
	dir := t.TempDir()
	size := int64(2 * bs)
	src := &source{data: content("idle", size)}
	obj := blockcache.Object{ID: "idle", Size: size}
	c := open(t, dir, 0)
	check(t, c, obj, src, 0, 1)
	check(t, c, obj, src, bs, 1)
	first, _, _ := c.Record(obj.ID, 0)
	second, _, _ := c.Record(obj.ID, 1)
	if first == second || len(blockcache.Segments(dir)) != 2 {
		t.Fatalf("blocks in %s and %s; want two segments", first, second)
	}
	if n, tail, sealed, err := blockcache.Records(first); n != 1 || tail != 0 || !sealed || err != nil {
		t.Errorf("first segment: %d records, %d bytes after, sealed %v (%v); want one record, sealed", n, tail, sealed, err)
	}
	if st := check(t, open(t, dir, 0), obj, src, 0, size); st.Hits != 2 || src.requests.Load() != 2 {
		t.Errorf("%+v, %d requests in all; want both blocks from disk", st, src.requests.Load())
	}
}

// TestOldLayoutIsSwept stores a block in a folder that holds block files
// of the layout before segments: the first store's sweep deletes them.
func TestOldLayoutIsSwept(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "ab")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00112233445566778899aabbccddeeff-0.blk", "00112233445566778899aabbccddeeff-1.blk.tmp42"} {
		if err := os.WriteFile(filepath.Join(old, name), []byte("block"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := &source{data: content("new", 10)}
	check(t, open(t, dir, 0), blockcache.Object{ID: "new", Size: 10}, src, 0, 10)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old layout's folder is still there: %v", err)
	}
}

// TestUnwritableFolder reads through a cache whose folder cannot be made:
// every read returns the object's bytes from the store, and the blocks not
// stored are counted.
func TestUnwritableFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := open(t, filepath.Join(file, "blocks"), 0) // under a file: no folder can be made
	size := int64(3*bs + 5)
	src := &source{data: content("unwritable", size)}
	obj := blockcache.Object{ID: "unwritable", Size: size}
	for range 2 {
		if st := check(t, c, obj, src, 0, size); st.Unstored != 4 || st.Misses != 4 {
			t.Errorf("%+v; want 4 blocks fetched and not stored", st)
		}
	}
	if got := src.requests.Load(); got != 2 {
		t.Errorf("%d requests; want 2", got)
	}
}

// TestCheckedBlockReadInPart: once a cache has read a record whole and
// found it intact, its hits on the block read only the bytes they need, and
// right.
func TestCheckedBlockReadInPart(t *testing.T) {
	dir := t.TempDir()
	size := int64(bs + 500)
	src := &source{data: content("parts", size)}
	obj := blockcache.Object{ID: "parts", Size: size}
	check(t, open(t, dir, 0), obj, src, 0, size) // fetched and stored
	c := open(t, dir, 0)
	check(t, c, obj, src, 0, size) // read whole from disk and checked
	for _, r := range [][2]int64{{10, 100}, {bs - 7, 20}, {bs + 1, 499}, {0, bs}} {
		if st := check(t, c, obj, src, r[0], r[1]); st.Misses != 0 {
			t.Fatalf("read [%d, +%d): %+v, want hits", r[0], r[1], st)
		}
	}
	if src.requests.Load() != 1 {
		t.Fatalf("%d fetches, want 1", src.requests.Load())
	}
}

// TestWarm fetches the blocks of a range that are not on disk, each run of
// them with one request, leaves those that are, and reads of the range after
// it make no request.
func TestWarm(t *testing.T) {
	c := open(t, t.TempDir(), 0)
	size := int64(5*bs + 10)
	src := &source{data: content("warm", size)}
	obj := blockcache.Object{ID: "warm", Size: size}
	check(t, c, obj, src, 2*bs+5, 10) // block 2 on disk
	st, err := c.Warm(context.Background(), obj, bs-1, 3*bs+2, src.fetch)
	if err != nil {
		t.Fatal(err)
	}
	// Blocks 0-1 and 3-4 were missing: two runs, two requests.
	if st.Requests != 2 || st.Misses != 4 || src.requests.Load() != 3 {
		t.Fatalf("warm: %+v, %d fetches in all", st, src.requests.Load())
	}
	if st := check(t, c, obj, src, 0, size); st.Misses != 1 || src.requests.Load() != 4 { // the short last block alone
		t.Fatalf("read after warm: %+v, %d fetches in all", st, src.requests.Load())
	}
}

// runChildren starts a process of this test binary for each of envs (added
// to this process's environment), lets them all go at once by creating the
// file start, and waits for them, each child's failure an error with its
// output.
func runChildren(t *testing.T, start string, envs ...[]string) {
	t.Helper()
	var children []*exec.Cmd
	var outs []*bytes.Buffer
	for _, env := range envs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children, outs = append(children, cmd), append(outs, out)
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range children {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", i, err, outs[i])
		}
	}
}
