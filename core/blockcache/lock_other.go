//go:build !linux && !darwin

package blockcache

import (
	"context"
	"os"
	"time"
)

// Without fcntl(2), processes that miss one block may each fetch it; the
// rename that stores it keeps that safe.
const lockWait = 0

type lock struct{}

func acquire(context.Context, string, int64, time.Duration) (*lock, error) { return &lock{}, nil }

func (*lock) release() {}

func freeBytes(string) (int64, bool) { return 0, false }

// deleted reports false: where a file open cannot be deleted, a sweep never
// deletes a segment its writer holds.
func deleted(*os.File) bool { return false }
