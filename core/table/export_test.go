package table

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/store"
)

// WriteOrphan writes data files as an Append would, without committing them:
// what a writer killed between its data and its manifest leaves behind.
func WriteOrphan(ctx context.Context, uri string, data array.RecordReader) error {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer loc.Close()
	_, err = writeData(ctx, loc, data, WriteOptions{}.withDefaults())
	return err
}

// SetCommitHook makes every commit in this process call fn at each of its
// phases (see commitHook); nil removes it.
func SetCommitHook(fn func(phase string)) { commitHook = fn }

// ForgetProbes forgets which stores passed the check of their exclusive
// creates in this process, as a new process would.
func ForgetProbes() { honoured.Clear() }
