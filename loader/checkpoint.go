package loader

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/permutation"
)

// CheckpointFormat is the format of the checkpoints Loader.Checkpoint makes
// (Python's STATE_FORMAT). ParseCheckpoint reads CheckpointFormats.
const CheckpointFormat = 2

// CheckpointFormats are the checkpoint formats ParseCheckpoint reads. Format
// 1 has no TableID and no PermutationURI, and binds its table by URI.
var CheckpointFormats = []int{1, CheckpointFormat}

// Checkpoint is a run's position: what Python's StreamingDataset.state_dict()
// returns (docs/spec.md, "Checkpoints"), field for field and key for key, so
// that a Go service and a Python trainer read and write each other's
// checkpoints. It holds the identity of what is dealt, which must match the
// loader a run resumes with, and the position: StepsConsumed global steps of
// Epoch have reached the training loop.
type Checkpoint struct {
	Format          int     `json:"format"`
	PermutationID   string  `json:"permutation_id"`
	TableID         string  `json:"table_id,omitempty"` // "" in format 1
	TableURI        string  `json:"table_uri"`
	TableVersion    Version `json:"table_version"`
	NumSplits       int64   `json:"num_splits"`
	GlobalBatchSize int64   `json:"global_batch_size"` // 0 for token-budget steps
	ShuffleSeed     uint64  `json:"shuffle_seed"`
	// TokensPerStep and Oversize are those of token-budget steps, absent
	// (0 and "") for sample-count steps; after ShuffleSeed, where Python
	// writes them.
	TokensPerStep int64  `json:"tokens_per_step,omitempty"`
	Oversize      string `json:"oversize,omitempty"`
	// PermutationURI is where the dealt permutation lives; nil (null) for a
	// table dealt in row order, and in format 1.
	PermutationURI *string `json:"permutation_uri"`
	Epoch          int64   `json:"epoch"`
	StepsConsumed  int64   `json:"steps_consumed"`
	// WorkerPosition marks the position of one DataLoader worker, which may
	// run past the end of the epoch by fewer steps than there are workers.
	WorkerPosition bool `json:"worker_position,omitempty"`
}

// Version is a table version as a checkpoint records it: a string ("3",
// "p…"), read from a string or, as format 1 may hold it, a number (3).
type Version string

// UnmarshalJSON reads a version written as a string or a number.
func (v *Version) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*v = Version(n.String())
		return nil
	}
	return json.Unmarshal(b, (*string)(v))
}

// Checkpoint returns the checkpoint of l's run once stepsConsumed global
// steps of epoch have reached the training loop.
func (l *Loader) Checkpoint(epoch, stepsConsumed int64) Checkpoint {
	c := Checkpoint{Format: CheckpointFormat, PermutationID: l.order.ID(), TableID: l.table.ID(),
		TableURI: l.table.URI(), TableVersion: Version(l.table.Version()), NumSplits: l.opts.NumSplits,
		GlobalBatchSize: l.opts.GlobalBatchSize, ShuffleSeed: l.opts.ShuffleSeed, Epoch: epoch,
		StepsConsumed: stepsConsumed}
	if l.opts.TokensPerStep != 0 {
		c.TokensPerStep, c.Oversize = l.opts.TokensPerStep, l.opts.Oversize
	}
	if sp, ok := l.order.(*permutation.Split); ok {
		uri := sp.Permutations().URI()
		c.PermutationURI = &uri
	}
	return c
}

// ParseCheckpoint decodes a checkpoint from JSON, as Python's
// json.dump(ds.state_dict()) or json.Marshal of a Checkpoint writes it, and
// checks its format and position. where names the checkpoint in errors,
// which are InvalidArgument.
func ParseCheckpoint(data []byte, where string) (Checkpoint, error) {
	const op = "read checkpoint"
	var c Checkpoint
	if err := jsonargs.Decode(data, &c, true, op, where); err != nil {
		return c, err
	}
	// A null would leave its field zero: only permutation_uri may be null.
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) == nil {
		for _, key := range slices.Sorted(maps.Keys(fields)) {
			if key != "permutation_uri" && string(fields[key]) == "null" {
				return c, errcode.New(errcode.InvalidArgument, op, where, "%q is null, but it must be given", key)
			}
		}
	}
	if !slices.Contains(CheckpointFormats, c.Format) {
		return c, errcode.New(errcode.InvalidArgument, op, where,
			"state dict format is %d, this croupier reads formats %v", c.Format, CheckpointFormats)
	}
	switch {
	case c.Epoch < 0:
		return c, errcode.New(errcode.InvalidArgument, op, where, "epoch must be an integer >= 0, got %d", c.Epoch)
	case c.StepsConsumed < 0:
		return c, errcode.New(errcode.InvalidArgument, op, where, "steps_consumed must be an integer >= 0, got %d", c.StepsConsumed)
	case (c.GlobalBatchSize <= 0) == (c.TokensPerStep <= 0):
		return c, errcode.New(errcode.InvalidArgument, op, where,
			"global_batch_size %d, tokens_per_step %d: want one positive batch size or token budget", c.GlobalBatchSize, c.TokensPerStep)
	}
	return c, nil
}

// Resume checks that c was made by a run dealing what l deals, as Python's
// load_state_dict does (the same permutation, table, number of splits,
// global batch size or token budget, and shuffle seed; the table by its id,
// or by its URI in format 1), and returns where the run continues: step
// StepsConsumed of Epoch, or step 0 of the next epoch once an epoch is done.
// Errors are InvalidArgument and name the field and both values. For
// token-budget steps it plans the epoch's steps (see EpochSteps).
func (l *Loader) Resume(ctx context.Context, c Checkpoint) (epoch, step int64, err error) {
	const op = "resume"
	// A worker's own position may be past the end of the epoch by any
	// number of steps: the Go caller resumes it knowing its own workers.
	_, steps, err := l.position(ctx, c, RestoreOptions{Workers: math.MaxInt64})
	if err != nil {
		return 0, 0, err
	}
	if c.StepsConsumed < steps {
		return c.Epoch, c.StepsConsumed, nil
	}
	if c.Epoch == math.MaxInt64 {
		return 0, 0, errcode.New(errcode.InvalidArgument, op, l.table.URI(), "checkpoint ends epoch %d, the last there is", c.Epoch)
	}
	return c.Epoch + 1, 0, nil
}

// checkDeals checks that c was made by a run dealing what l deals (see
// Resume), whatever its position; with tableMoved, on a table moved or
// copied on purpose, its table_uri and table_version are not compared.
func (l *Loader) checkDeals(c Checkpoint, tableMoved bool) error {
	const op = "resume"
	mine := l.Checkpoint(0, 0)
	if kinds := [2]string{"sample-count steps", "token-budget steps"}; (c.TokensPerStep != 0) != (mine.TokensPerStep != 0) {
		theirs, ours := kinds[0], kinds[1]
		if c.TokensPerStep != 0 {
			theirs, ours = ours, theirs
		}
		return errcode.New(errcode.InvalidArgument, op, l.table.URI(),
			"checkpoint tokens_per_step is %d but this loader's is %d: the checkpoint deals %s, this loader %s",
			c.TokensPerStep, mine.TokensPerStep, theirs, ours)
	}
	// Format 1 binds its table by URI, later formats by ID.
	table := checkpointField{"table_id", c.TableID, mine.TableID}
	if c.Format == 1 {
		table = checkpointField{"table_uri", c.TableURI, mine.TableURI}
	}
	version := checkpointField{"table_version", c.TableVersion, mine.TableVersion}
	if tableMoved {
		version.theirs = version.ours
		if c.Format == 1 {
			table.theirs = table.ours
		}
	}
	if f, differ := mismatch(
		checkpointField{"permutation_id", c.PermutationID, mine.PermutationID},
		table,
		version,
		checkpointField{"num_splits", c.NumSplits, mine.NumSplits},
		checkpointField{"global_batch_size", c.GlobalBatchSize, mine.GlobalBatchSize},
		checkpointField{"tokens_per_step", c.TokensPerStep, mine.TokensPerStep},
		checkpointField{"oversize", c.Oversize, mine.Oversize},
		checkpointField{"shuffle_seed", c.ShuffleSeed, mine.ShuffleSeed},
	); differ {
		hint := ""
		if f.name == "table_uri" || f.name == "table_version" {
			hint = " (a table moved or copied on purpose: resume with table_moved)"
		}
		return errcode.New(errcode.InvalidArgument, op, l.table.URI(),
			"checkpoint %s is %s but this loader's is %s%s", f.name, quote(f.theirs), quote(f.ours), hint)
	}
	return nil
}

// checkpointField is a field of a checkpoint, as the checkpoint has it and
// as the run resuming from it would.
type checkpointField struct {
	name         string
	theirs, ours any
}

// mismatch returns the first of fields whose two values differ, if any.
func mismatch(fields ...checkpointField) (checkpointField, bool) {
	for _, f := range fields {
		if f.theirs != f.ours {
			return f, true
		}
	}
	return checkpointField{}, false
}

// rawJSON is a checkpoint field's value as JSON text, written as it is.
type rawJSON string

// quote writes a string value as JSON does, other values as they are.
func quote(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case Version:
		return fmt.Sprintf("%q", string(v))
	case rawJSON:
		return string(v)
	}
	return fmt.Sprint(v)
}
