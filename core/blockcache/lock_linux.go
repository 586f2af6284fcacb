package blockcache

// setLockCmd is F_OFD_SETLK, which the syscall package does not name: a
// range owned by the open file, not by the process, so that a second open
// of the file in the process (a test's, or a Cache's after the first closed
// nothing) is excluded too.
const setLockCmd = 37
