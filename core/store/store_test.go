package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
)

func TestMatchFile(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.parquet", "b.parquet", "sub/c.parquet", "_SUCCESS", ".hidden/d.parquet", "_tmp/e.parquet"} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(name), 0o644)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		uri   string
		want  []string
		first string // file path of want[0]
	}{
		{"file://" + dir, []string{"a.parquet", "b.parquet", "sub/c.parquet"}, "a.parquet"},
		{"file://" + dir + "/sub", []string{"c.parquet"}, "sub/c.parquet"},
		{"file://" + dir + "/b.parquet", []string{"b.parquet"}, "b.parquet"},
		{"file://" + dir + "/_SUCCESS", []string{"_SUCCESS"}, "_SUCCESS"},
		{"file://" + dir + "/*.parquet", []string{"a.parquet", "b.parquet"}, "a.parquet"},
		{"file://" + dir + "/sub/*.parquet", []string{"c.parquet"}, "sub/c.parquet"},
	} {
		loc, err := store.Open(ctx, tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := loc.Match(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := keysOf(objs)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.uri, got, tc.want)
		}
		if ou := loc.ObjectURI(tc.want[0]); ou != "file://"+filepath.Join(dir, tc.first) {
			t.Errorf("%s: ObjectURI = %s", tc.uri, ou)
		}
		loc.Close()
	}
}

func TestMemBucketsPersistByName(t *testing.T) {
	ctx := context.Background()
	a, err := store.Open(ctx, "mem://storetest/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteAll(ctx, "x/obj", []byte("hello"), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := store.Open(ctx, "mem://storetest/x")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.Match(ctx)
	if err != nil || !slices.Equal(keysOf(objs), []string{"x/obj"}) || objs[0].Size != 5 {
		t.Fatalf("reopened mem bucket lists %v, %v", objs, err)
	}
	obj, err := b.Stat(ctx, "x/obj")
	if err != nil {
		t.Fatal(err)
	}
	r := b.NewReaderAt(ctx, obj)
	buf := make([]byte, 3)
	if n, err := r.ReadAt(buf, 1); err != nil || string(buf[:n]) != "ell" {
		t.Fatalf("ReadAt = %q, %v", buf[:n], err)
	}
	if b.ObjectURI("x/obj") != "mem://storetest/x/obj" {
		t.Errorf("ObjectURI = %s", b.ObjectURI("x/obj"))
	}
	// overwrite: the pinned reader notices
	if err := b.WriteAll(ctx, "x/obj", []byte("hello, world"), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(buf, 0); errcode.Of(err) != errcode.Changed {
		t.Fatalf("read after overwrite = %v, want Changed", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		uri  string
		code errcode.Code
	}{
		{"no/scheme", errcode.InvalidArgument},
		{"file://relative/x", errcode.InvalidArgument},
		{"file:///definitely/not/here", errcode.NotFound},
		{"mem:///nobucket", errcode.InvalidArgument},
		{"nosuchscheme://b/k", errcode.InvalidArgument},
	} {
		_, err := store.Open(ctx, tc.uri)
		if errcode.Of(err) != tc.code {
			t.Errorf("Open(%s) = %v, want %s", tc.uri, err, tc.code)
		}
	}
}

// TestCreateExclusiveRace races 16 creates of one key on every store: exactly
// one wins, the others get AlreadyExists, and the object is the winner's.
func TestCreateExclusiveRace(t *testing.T) {
	ctx := context.Background()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, uri := range map[string]string{
		"file": "file://" + t.TempDir(),
		"mem":  "mem://storetest-excl/t",
		"s3":   s.URI("bkt", "t"),
	} {
		t.Run(name, func(t *testing.T) {
			loc, err := store.Open(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			key := loc.Join("_versions/00000000000000000001.json")
			var wins atomic.Int64
			var winner atomic.Int64
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					err := loc.CreateExclusive(ctx, key, []byte(fmt.Sprintf("writer %d", i)))
					switch errcode.Of(err) {
					case errcode.OK:
						wins.Add(1)
						winner.Store(int64(i))
					case errcode.AlreadyExists:
						if !strings.Contains(err.Error(), "00000000000000000001.json") {
							t.Errorf("error does not name the object: %v", err)
						}
					default:
						t.Errorf("writer %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d writers won", wins.Load())
			}
			got, err := loc.ReadAll(ctx, key)
			if err != nil || string(got) != fmt.Sprintf("writer %d", winner.Load()) {
				t.Fatalf("object = %q, %v; winner %d", got, err, winner.Load())
			}
		})
	}
}

// keysOf returns the keys of objs.
func keysOf(objs []store.Object) []string {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

// TestLocalFilesHeldOpen reads 100 local files in turn from 8 goroutines: a
// file:// Location holds at most 64 of them open, returns their bytes, closes
// them all when it closes, and still refuses a file rewritten in place while
// it is held open; one removed while held open is still read, its pinned
// bytes.
func TestLocalFilesHeldOpen(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count descriptors")
		}
		return len(ents)
	}
	ctx := context.Background()
	dir := t.TempDir()
	const files = 100
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprintf("file %03d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := fds()
	loc, err := store.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loc.Match(ctx)
	if err != nil || len(objs) != files {
		t.Fatalf("Match = %d objects, %v", len(objs), err)
	}
	var wg sync.WaitGroup
	var most atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 3)
			for k := range 3 * files {
				i := (k*7 + w*13) % files
				obj, err := loc.Stat(ctx, objs[i].Key)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := loc.NewReaderAt(ctx, obj).ReadAt(buf, 5); err != nil || string(buf) != fmt.Sprintf("%03d", i) {
					t.Errorf("read of %s = %q, %v", obj.Key, buf, err)
					return
				}
				if n := int64(fds() - before); n > most.Load() {
					most.Store(n)
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() > 64+8 { // the held files, and a few the Location opens to stat and list
		t.Errorf("%d descriptors open while reading, want at most 64 held", most.Load())
	}
	obj, err := loc.Stat(ctx, "f000")
	if err != nil {
		t.Fatal(err)
	}
	r := loc.NewReaderAt(ctx, obj)
	buf := make([]byte, len("file 000"))
	if _, err := r.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	// Removed: the descriptor held open still reads the pinned bytes.
	if err := os.Rename(filepath.Join(dir, "f000"), filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(buf, 0); err != nil || string(buf) != "file 000" {
		t.Fatalf("read of a removed file held open = %q, %v; want its pinned bytes", buf, err)
	}
	if err := os.Rename(filepath.Join(dir, "gone"), filepath.Join(dir, "f000")); err != nil {
		t.Fatal(err)
	}
	// In place: same inode, same size, a later modification time.
	if err := os.WriteFile(filepath.Join(dir, "f000"), []byte("FILE 000"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := obj.ModTime.Add(time.Second)
	if err := os.Chtimes(filepath.Join(dir, "f000"), later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(buf, 0); errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), "f000") {
		t.Fatalf("read of a file rewritten in place = %q, %v; want Changed naming it", buf, err)
	}
	loc.Close()
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after Close, %d before Open", after, before)
	}
}

// TestFileDeleteLeavesNoEmptyFolders deletes files of a file:// location:
// the folders a deleted file leaves empty go with it, up to the location's
// root, and no others; writers and deleters racing in one folder never fail,
// and every file written and not deleted is there.
func TestFileDeleteLeavesNoEmptyFolders(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	loc, err := store.Open(ctx, "file://"+root)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	for _, key := range []string{"a/b/c/x", "a/b/y", "a/z"} {
		if err := loc.WriteAll(ctx, key, []byte(key), store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, rel))
		return err == nil
	}
	steps := []struct {
		key        string
		gone, kept []string
	}{
		{"a/b/c/x", []string{"a/b/c"}, []string{"a/b", "a"}},
		{"a/b/y", []string{"a/b"}, []string{"a"}},
		{"a/z", []string{"a"}, []string{"."}},
	}
	for _, s := range steps {
		if err := loc.Delete(ctx, s.key); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.gone {
			if exists(d) {
				t.Errorf("after deleting %s, folder %s is still there", s.key, d)
			}
		}
		for _, d := range s.kept {
			if !exists(d) {
				t.Errorf("after deleting %s, folder %s is gone", s.key, d)
			}
		}
	}

	// Writers and deleters in one folder, the folder emptied and made again
	// over and over.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("spill/0/w%d-%d", w, i)
				if err := loc.WriteAll(ctx, key, []byte(key), store.WriterOptions{}); err != nil {
					t.Errorf("write %s: %v", key, err)
					return
				}
				if i%2 == 0 {
					if err := loc.Delete(ctx, key); err != nil {
						t.Errorf("delete %s: %v", key, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for w := range 4 {
		for i := 1; i < 200; i += 2 {
			key := fmt.Sprintf("spill/0/w%d-%d", w, i)
			if got, err := loc.ReadAll(ctx, key); err != nil || string(got) != key {
				t.Fatalf("%s = %q, %v", key, got, err)
			}
		}
	}
}
