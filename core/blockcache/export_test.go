package blockcache

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"
)

// HeaderSize is the size of a record's header.
const HeaderSize = headerSize

// Record returns the segment file that holds block b of the object whose ID
// is id, as far as the cache knows after a look at its folder, and the
// offset of the block's record in it.
func (c *Cache) Record(id string, b int64) (path string, off int64, ok bool) {
	c.scan()
	e := c.lookup(key{sha256.Sum256([]byte(id)), b})
	if e == nil {
		return "", 0, false
	}
	return filepath.Join(c.dir, e.seg.name), e.off - headerSize, true
}

// Sweep sweeps the folder now.
func (c *Cache) Sweep(ctx context.Context) { c.sweep(ctx) }

// Segments returns the segment files of the folder dir.
func Segments(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	return files
}

// Records reads the segment file at path from its start and returns the
// blocks of its whole records, the bytes after them that are neither whole
// records nor a seal, and whether it is sealed.
func Records(path string) (blocks int, tail int64, sealed bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, false, err
	}
	found, end, _, sealed := scanFrom(&segment{f: f}, 0)
	if sealed {
		end += headerSize
	}
	return len(found), fi.Size() - end, sealed, nil
}

// SetIdleAge sets how long a writer may go without appending before it
// starts a new segment, until the test ends.
func SetIdleAge(t interface{ Cleanup(func()) }, d time.Duration) {
	was := idleAge
	idleAge = d
	t.Cleanup(func() { idleAge = was })
}
