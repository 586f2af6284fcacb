//go:build linux || darwin

package blockcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockWait bounds the wait for a block that another process fetches; past
// it the block is fetched again, as if there were no lock. A holder's fetch
// is bounded by its store's retries, but a process may be stopped while it
// holds a lock.
const lockWait = 30 * time.Second

// errBusy says that a lock asked for without waiting is held.
var errBusy = errors.New("lock held by another process")

// flock(2), fstat(2) and statfs(2) come from syscall, which every program
// links already: golang.org/x/sys/unix would add a package to the smallest
// program that reads tables (internal/sideeffects holds it to 300).

// A lock is an flock(2) held on a lock file. The holder removes the file
// before it lets go, so that no lock file outlives its use; a process that
// opened the file before and then gets the lock finds it is no longer the
// file at its path, and opens the path again.
type lock struct {
	f    *os.File
	path string
}

// acquire takes the lock of path, creating the file (and its folder) if
// needed, waiting at most wait for another holder to let go (0: not at all,
// errBusy then) and until ctx is done.
func acquire(ctx context.Context, path string, wait time.Duration) (*lock, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if os.IsNotExist(err) {
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			}
		}
		if err != nil {
			return nil, err
		}
		if err := flock(ctx, f, deadline); err != nil {
			f.Close()
			return nil, err
		}
		var held, there syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &there) == nil &&
			held.Dev == there.Dev && held.Ino == there.Ino {
			return &lock{f: f, path: path}, nil
		}
		f.Close() // the file was removed by the holder before: lock the path's
	}
}

// flock takes an exclusive flock on f, polling until deadline or ctx is
// done: a blocking flock(2) could not be given up when ctx is canceled.
func flock(ctx context.Context, f *os.File, deadline time.Time) error {
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			return err
		case time.Now().After(deadline):
			return errBusy
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, 16*time.Millisecond)
	}
}

// release removes the lock file and lets go of the lock.
func (l *lock) release() {
	os.Remove(l.path)
	l.f.Close()
}

// freeBytes returns the bytes free to unprivileged users on the filesystem
// of dir, or of its nearest existing parent.
func freeBytes(dir string) (int64, bool) {
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(dir, &st)
		if err == nil {
			return int64(st.Bavail) * int64(st.Bsize), true
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, syscall.ENOENT) || parent == dir {
			return 0, false
		}
		dir = parent
	}
}
