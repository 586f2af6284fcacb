package blockcache

import "syscall"

// setLockCmd is F_SETLK: darwin has no open file description locks, and
// the process's own POSIX locks do for processes (see lock_unix.go).
const setLockCmd = syscall.F_SETLK
