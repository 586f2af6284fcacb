//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package catalog

import (
	"errors"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// lockFile takes the lock bbolt takes on the file it opens (flock(2),
// exclusive to write, shared to read), waiting at most timeout, so that the
// file is checked while no writer changes it. bbolt's own lock on the same
// open file then succeeds at once, and its Close releases it.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		if time.Now().After(deadline) {
			return berrors.ErrTimeout
		}
		time.Sleep(10 * time.Millisecond)
	}
}
