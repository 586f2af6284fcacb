//go:build linux || darwin

package blockcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
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

// fcntl(2), fstat(2) and statfs(2) come from syscall, which every program
// links already: golang.org/x/sys/unix would add a package to the smallest
// program that reads tables (internal/sideeffects holds it to 300).

// The locks of a folder are byte-range locks on one file, lockFile, which
// every process keeps open once it has used the folder: a lock is one byte
// of it (lockOffset), taken with fcntl(2). A lock file per block cost two
// file creations a block stored (the lock's and the block's), and creating
// a file is the most expensive thing a filesystem does: half a millisecond
// of system time on some virtual disks, more than fetching the block from a
// store on the same network. The kernel releases a dying process's ranges
// as it did its flocks. Two keys may share a byte: then one waits for the
// other's fetch, no more.
//
// On Linux the ranges are open file description locks (F_OFD_SETLK), owned
// by the one open file of the process (setLock in lock_linux.go); elsewhere
// they are the process's own POSIX locks, which its own goroutines do not
// exclude, and which closing any descriptor of the file would let go: the
// file is never closed. Goroutines of one process exclude each other before
// they take a range (flights in blockcache.go).

// A lock is a range held on a folder's lock file.
type lock struct {
	f   *os.File
	off int64
}

// lockFiles holds each folder's open lock file, by folder.
var lockFiles sync.Map

// lockFileOf returns dir's lock file, opened once a process, creating the
// folder and the file if needed.
func lockFileOf(dir string) (*os.File, error) {
	if f, ok := lockFiles.Load(dir); ok {
		return f.(*os.File), nil
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if os.IsNotExist(err) {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		}
	}
	if err != nil {
		return nil, err
	}
	if was, loaded := lockFiles.LoadOrStore(dir, f); loaded {
		f.Close()
		return was.(*os.File), nil
	}
	return f, nil
}

// acquire takes the lock at byte off of dir's lock file, waiting at most
// wait for another process to let go (0: not at all, errBusy then) and
// until ctx is done: a blocking fcntl(2) could not be given up when ctx is
// canceled, so it polls.
func acquire(ctx context.Context, dir string, off int64, wait time.Duration) (*lock, error) {
	f, err := lockFileOf(dir)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		err := setLock(f, off, syscall.F_WRLCK)
		switch {
		case err == nil:
			return &lock{f: f, off: off}, nil
		case !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EINTR):
			return nil, err
		case time.Now().After(deadline):
			return nil, errBusy
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, 16*time.Millisecond)
	}
}

// release lets go of the lock.
func (l *lock) release() { setLock(l.f, l.off, syscall.F_UNLCK) }

// setLock sets the lock of kind (F_WRLCK or F_UNLCK) on byte off of f,
// without waiting.
func setLock(f *os.File, off int64, kind int16) error {
	return syscall.FcntlFlock(f.Fd(), setLockCmd, &syscall.Flock_t{Type: kind, Whence: 0, Start: off, Len: 1})
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

// deleted reports whether f was unlinked from its folder: a segment that a
// sweep deleted while its writer held it open.
func deleted(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
