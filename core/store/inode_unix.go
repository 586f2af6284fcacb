//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// inode returns the inode number of the file fi describes.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// fileVersion returns the size, modification time and inode of the open file
// f, with one fstat into memory of its own: os.File.Stat allocates a FileInfo
// each time, and a read of local files checks the version after every pread.
func fileVersion(f *os.File) (Object, error) {
	conn, err := f.SyscallConn()
	if err != nil {
		return Object{}, err
	}
	var st syscall.Stat_t
	var serr error
	if err := conn.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil {
		// Control fails only on a file closed meanwhile (by a read that made
		// room or saw the file change), and says so as the poller's own
		// error, not os.ErrClosed, which readLocal knows to reopen on.
		return Object{}, fmt.Errorf("fstat %s: %w (%v)", f.Name(), os.ErrClosed, err)
	}
	if serr != nil {
		return Object{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: serr}
	}
	return Object{Size: st.Size, ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Inode: uint64(st.Ino)}, nil
}
