package loader

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/permutation"
	"github.com/croupier-data/croupier/permutation/expr"
)

// VersionColumn is the column following adds to every batch: the version
// that added each row.
const VersionColumn = "_version"

// Follower deals a growing croupier table in rounds (see planRound) for one
// rank. It is safe for concurrent use; its streams are not.
type Follower struct {
	table  *table.Table // any version of the table: it lists and reads manifests
	opts   Options
	follow FollowOptions

	// refreshing lets one refresh run at a time: it reads the store without
	// holding mu, which guards the rest.
	refreshing sync.Mutex
	mu         sync.Mutex
	log        versionLog // versions from StartVersion on, as far as seen
	// at is the version rounds read their rows from: appends keep row ids,
	// so it holds the rows of every version before it, and its footers and
	// pages, once read, serve the rounds after.
	at        *table.Table
	atVersion int64
	// formed are the rounds formed last, the newest last: a stream forms a
	// round ahead (FollowStream.warm) before it opens it, and the streams
	// of a rank's workers form the same rounds.
	formed []Round
	closed bool
	// run names the table's records of this run's decisions (decideNewest):
	// a digest of what the rounds depend on.
	run string
	// filter is FollowOptions.Filter parsed; nil without one.
	filter *expr.Expr
	// observing: the follower reads the run's decisions, records none
	// (Observe).
	observing bool
}

// Observe makes f read the decisions of its run (MaxVersionsBehindNewest)
// and never record one, for a process that inspects a run rather than
// learns from it: a round no process of the run has decided yet ends the
// wait for it (io.EOF), as versions not yet committed do. Call it before
// forming a round.
func (f *Follower) Observe() { f.observing = true }

// formedRounds bounds Follower.formed.
const formedRounds = 2

// NewFollower returns a follower of t's croupier table dealing
// sample-count steps (GlobalBatchSize) or token-budget steps (TokensPerStep,
// of FollowOptions.Lengths) as opts say. It validates the options and the
// columns; t may be any version of the table.
func NewFollower(t *table.Table, opts Options, fo FollowOptions) (*Follower, error) {
	const op = "follow"
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidArgument, op, t.URI(), format, args...)
	}
	if t.Kind() != table.KindCroupier {
		return nil, bad("a plain Parquet dataset does not grow: follow a croupier table")
	}
	if err := fo.check(t.URI()); err != nil {
		return nil, err
	}
	tokens := opts.TokensPerStep != 0
	switch {
	case opts.TokensPerStep < 0:
		return nil, bad("tokens_per_step is %d; it must be positive", opts.TokensPerStep)
	case tokens && fo.Lengths == "":
		return nil, bad("tokens_per_step %d needs the length of every row: give lengths=<column>", opts.TokensPerStep)
	case !tokens && fo.Lengths != "":
		return nil, bad("lengths %q serves token-budget steps: give tokens_per_step too", fo.Lengths)
	case tokens && (opts.GlobalBatchSize != 0 || opts.NumSplits != 0):
		return nil, bad("tokens_per_step %d with global_batch_size %d and num_splits %d: steps are counted in tokens or in samples, give one",
			opts.TokensPerStep, opts.GlobalBatchSize, opts.NumSplits)
	}
	if fo.Lengths != "" {
		if err := permutation.CheckLengthsColumn(t.Schema(), fo.Lengths); err != nil {
			return nil, bad("lengths: %v", err)
		}
	}
	var filter *expr.Expr
	if fo.Filter != "" {
		var err error
		if filter, err = expr.Parse(fo.Filter, t.Schema()); err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "follow: filter", t.URI())
		}
		if filter.Type().ID() != arrow.BOOL {
			return nil, bad("filter %q gives %s, not a boolean", fo.Filter, filter.Type())
		}
	}
	// Rounds deal whole steps only: what does not fill one is carried.
	opts.DropLast = !tokens
	// A loader over one step of the identity checks the other options, of
	// sample-count steps.
	check := opts
	if tokens {
		check.TokensPerStep, check.Oversize, check.GlobalBatchSize = 0, "", max(opts.WorldSize, 1)
	}
	l, err := New(t, permutation.Identity{N: max(check.GlobalBatchSize, 1)}, check)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if tokens {
		l.opts.TokensPerStep, l.opts.GlobalBatchSize, l.opts.NumSplits = opts.TokensPerStep, 0, 0
		l.opts.Oversize = cmp.Or(opts.Oversize, OversizeError)
		if o := l.opts.Oversize; o != OversizeError && o != OversizeTruncate {
			return nil, bad("oversize %q is neither %q nor %q", o, OversizeError, OversizeTruncate)
		}
	}
	if slices.Contains(l.opts.Columns, VersionColumn) {
		return nil, errcode.New(errcode.InvalidArgument, op, t.URI(),
			"the table has a column %q, which following adds to each batch; read the other columns", VersionColumn)
	}
	if len(fo.GroupBy) > 0 {
		r, err := t.NewReader(table.ReaderOptions{Columns: fo.GroupBy})
		if err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "follow: group_by", t.URI())
		}
		r.Close()
	}
	t.Retain()
	f := &Follower{table: t, opts: l.opts, follow: fo, filter: filter,
		log: versionLog{first: fo.StartVersion, grouped: len(fo.GroupBy) > 0 || filter != nil}}
	if filter != nil {
		f.log.kept = []int{} // no group kept yet: not nil, which means every group
	}
	c := f.Checkpoint(f.Start(), 0)
	c.TableURI = "" // the records are the table's: another spelling of its URI is the same run
	b, err := json.Marshal(c)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, t.URI())
	}
	sum := sha256.Sum256(b)
	f.run = hex.EncodeToString(sum[:16])
	return f, nil
}

// Close releases the follower's references to its table.
func (f *Follower) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.table.Close()
	if f.at != nil {
		err = errors.Join(err, f.at.Close())
		f.at = nil
	}
	return err
}

// Options returns the dealing options with defaults filled in.
func (f *Follower) Options() Options { return f.opts }

// FollowOptions returns the following options with defaults filled in.
func (f *Follower) FollowOptions() FollowOptions { return f.follow }

// Start is the position of the first round.
func (f *Follower) Start() FollowPosition {
	return FollowPosition{After: f.follow.StartVersion - 1, Carry: []uint64{}}
}

// FollowCheckpointFormat is the format of following's checkpoints (Python's
// follow.STATE_FORMAT).
const FollowCheckpointFormat = 1

// FollowCheckpoint is the position of a run following a table: what
// Python's FollowingDataset.state_dict() returns, key for key, so that a Go
// service and a Python learner read each other's checkpoints. It holds what
// the rounds depend on, which must match the follower a run resumes with
// (Follow without its waits, which steps do not depend on), and Position,
// the round holding the next step, StepsConsumed global steps having reached
// the training loop.
type FollowCheckpoint struct {
	Format          int            `json:"format"`
	Kind            string         `json:"kind"` // "follow"
	TableURI        string         `json:"table_uri"`
	GlobalBatchSize int64          `json:"global_batch_size"`
	NumSplits       int64          `json:"num_splits"`
	TokensPerStep   int64          `json:"tokens_per_step,omitempty"`
	Oversize        string         `json:"oversize,omitempty"`
	ShuffleSeed     uint64         `json:"shuffle_seed"`
	Follow          FollowOptions  `json:"follow"`
	Position        FollowPosition `json:"position"`
	StepsConsumed   int64          `json:"steps_consumed"`
}

// Checkpoint returns the checkpoint of a run whose next step, the global
// step stepsConsumed, is in the round at pos (a Round's FollowPosition, or
// its Next once its last step is consumed).
func (f *Follower) Checkpoint(pos FollowPosition, stepsConsumed int64) FollowCheckpoint {
	rule := f.follow
	rule.WaitTimeout, rule.PollInterval = 0, 0
	return FollowCheckpoint{Format: FollowCheckpointFormat, Kind: "follow", TableURI: f.table.URI(),
		GlobalBatchSize: f.opts.GlobalBatchSize, NumSplits: f.opts.NumSplits, ShuffleSeed: f.opts.ShuffleSeed,
		TokensPerStep: f.opts.TokensPerStep, Oversize: f.opts.Oversize,
		Follow: rule, Position: pos, StepsConsumed: stepsConsumed}
}

// ParseFollowCheckpoint decodes a following checkpoint; where names it in
// errors.
func ParseFollowCheckpoint(data []byte, where string) (FollowCheckpoint, error) {
	const op = "read follow checkpoint"
	var c FollowCheckpoint
	if err := jsonargs.Decode(data, &c, true, op, where); err != nil {
		return c, err
	}
	if c.Format != FollowCheckpointFormat || c.Kind != "follow" {
		return c, errcode.New(errcode.InvalidArgument, op, where,
			"state dict format %d, kind %q: following reads format %d, kind \"follow\"", c.Format, c.Kind, FollowCheckpointFormat)
	}
	if c.StepsConsumed < c.Position.Step {
		return c, errcode.New(errcode.InvalidArgument, op, where,
			"steps_consumed %d is before its position's step %d", c.StepsConsumed, c.Position.Step)
	}
	return c, nil
}

// Resume checks that c was made by a run of this follower (the same table
// URI, global batch size, splits, seed and rule of rounds) and returns the
// position and step to start a stream at (Stream). Errors are
// InvalidArgument and name the field and both values.
func (f *Follower) Resume(c FollowCheckpoint) (FollowPosition, int64, error) {
	mine := f.Checkpoint(f.Start(), 0)
	if x, differ := mismatch(
		checkpointField{"table_uri", c.TableURI, mine.TableURI},
		checkpointField{"global_batch_size", c.GlobalBatchSize, mine.GlobalBatchSize},
		checkpointField{"num_splits", c.NumSplits, mine.NumSplits},
		checkpointField{"tokens_per_step", c.TokensPerStep, mine.TokensPerStep},
		checkpointField{"oversize", c.Oversize, mine.Oversize},
		checkpointField{"shuffle_seed", c.ShuffleSeed, mine.ShuffleSeed},
		ruleField(c.Follow, mine.Follow),
	); differ {
		return FollowPosition{}, 0, errcode.New(errcode.InvalidArgument, "resume following", f.table.URI(),
			"checkpoint %s is %s but this follower's is %s", x.name, quote(x.theirs), quote(x.ours))
	}
	return c.Position, c.StepsConsumed, nil
}

// ruleField is the first option of following's rule whose JSON differs
// between theirs and ours, named follow.<key>; equal values when none does.
func ruleField(theirs, ours FollowOptions) checkpointField {
	a, b := reflect.ValueOf(theirs), reflect.ValueOf(ours)
	for i := range a.NumField() {
		key, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("json"), ",")
		x, errA := json.Marshal(a.Field(i).Interface())
		y, errB := json.Marshal(b.Field(i).Interface())
		if errA != nil || errB != nil || !bytes.Equal(x, y) {
			return checkpointField{"follow." + key, rawJSON(x), rawJSON(y)}
		}
	}
	return checkpointField{"follow", "", ""}
}

// VersionOf returns the version that added row id, when the follower has
// read it (a round holding the row has been formed).
func (f *Follower) VersionOf(id uint64) (int64, bool) {
	log := f.snapshot()
	if int64(id) < log.start || int64(id) >= log.rowsStart(log.latest()+1) {
		return 0, false
	}
	return log.versionOf(id), true
}

// refresh reads the versions committed since the log's latest, checking
// that each kept the files of the one before (appends only). It reports
// whether the log grew.
func (f *Follower) refresh(ctx context.Context) (bool, error) {
	const op = "follow"
	f.refreshing.Lock()
	defer f.refreshing.Unlock()
	versions, err := f.table.Versions(ctx)
	if err != nil {
		return false, err
	}
	// Build on a copy, so that a failure leaves the log as it was. Snapshots
	// see only their own lengths of the slices the copy appends to, and only
	// a refresh changes the log.
	next := f.snapshot()
	if len(versions) == 0 || versions[len(versions)-1] <= next.latest() {
		if len(versions) > 0 && versions[len(versions)-1] < next.latest() {
			return false, errcode.New(errcode.Changed, op, f.table.URI(),
				"the latest version is %d, but version %d was committed: the table was replaced", versions[len(versions)-1], next.latest())
		}
		return false, nil
	}
	read := next.rowsStart(next.latest() + 1) // rows whose groups are read, when the log has versions
	from := next.latest() + 1
	added, errs := f.appended(ctx, from, versions[len(versions)-1])
	for i, a := range added {
		v, err := from+int64(i), errs[i]
		if errcode.Of(err) == errcode.NotFound {
			return false, errcode.New(errcode.Changed, op, f.table.URI(),
				"version %d was removed (by cleanup?) before it was followed: following reads every version from start_version %d; "+
					"keep the versions a learner has not reached, or start it at a later version", v, next.first)
		}
		if err != nil {
			return false, err
		}
		if len(next.ends) == 0 {
			next.start, read = a.Start, a.Start
		} else if a.Base != next.heads[len(next.heads)-1] || a.Start != next.rowsStart(v) {
			return false, errcode.New(errcode.Changed, op, f.table.URI(),
				"version %d does not keep the rows of version %d (it was overwritten or rewritten): following needs a table that only grows by appends", v, v-1)
		}
		next.ends = append(next.ends, a.End)
		next.heads = append(next.heads, a.Head)
	}
	if next.grouped || f.follow.Lengths != "" {
		if err := f.readRows(ctx, &next, read); err != nil {
			return false, err
		}
	}
	f.mu.Lock()
	f.log = next
	f.mu.Unlock()
	return true, nil
}

// manifestReads bounds the manifests refresh reads at once: a follower
// that starts behind, or on a distant store, would otherwise wait a round
// trip for each version.
const manifestReads = 64

// appended reads what versions from to to added: from version to's
// manifest alone where it says (table.AppendedThrough), else from each
// version's, manifestReads at a time; errs[i] is the error of version
// from+i.
func (f *Follower) appended(ctx context.Context, from, to int64) (added []table.Appended, errs []error) {
	if as, ok, err := f.table.AppendedThrough(ctx, from, to); err == nil && ok {
		return as, make([]error, len(as))
	}
	added, errs = make([]table.Appended, to-from+1), make([]error, to-from+1)
	var g errgroup.Group
	g.SetLimit(manifestReads)
	for i := range added {
		g.Go(func() error {
			defer errcode.Recover(&errs[i], errcode.Internal, fmt.Sprintf("read version %d of", from+int64(i)), f.table.URI())
			added[i], errs[i] = f.table.Appended(ctx, from+int64(i))
			return nil
		})
	}
	g.Wait()
	return added, errs
}

// readRows adds to log what it needs of its rows from row id from on, read
// from the log's latest version: with GroupBy, the groups (runs of adjacent
// rows of one version with equal GroupBy values; with Filter alone, every
// row); with Filter, the rows it drops, the groups holding a row it keeps
// and the rows each version keeps; with Lengths, each row's length. It
// reads only those columns.
func (f *Follower) readRows(ctx context.Context, log *versionLog, from int64) error {
	latest := log.latest()
	t, err := f.table.OpenVersion(ctx, latest)
	if err != nil {
		return err
	}
	defer t.Close()
	columns := slices.Clone(f.follow.GroupBy)
	if f.filter != nil {
		columns = append(columns, f.filter.Columns()...)
	}
	if f.follow.Lengths != "" {
		columns = append(columns, f.follow.Lengths)
	}
	slices.Sort(columns)
	columns = slices.Compact(columns)
	r, err := t.NewReader(table.ReaderOptions{Columns: columns})
	if err != nil {
		return err
	}
	defer r.Close()
	for v := log.versionOf(uint64(from)); v <= latest; v++ {
		start, end := log.rowsStart(v), log.rowsStart(v+1)
		if start == end {
			if f.filter != nil {
				log.keptEnds = append(log.keptEnds, log.keptRows())
			}
			continue
		}
		ids := make([]uint64, end-start)
		for i := range ids {
			ids[i] = uint64(start) + uint64(i)
		}
		rec, err := r.Read(ctx, ids)
		if err != nil {
			return err
		}
		err = f.logVersion(ctx, log, v, start, rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// logVersion adds to log what readRows says of the rows of version v, rec,
// whose first row id is start.
func (f *Follower) logVersion(ctx context.Context, log *versionLog, v, start int64, rec arrow.RecordBatch) error {
	col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
	n := int(rec.NumRows())
	first := len(log.groups)
	if len(f.follow.GroupBy) > 0 {
		keys := make([]arrow.Array, 0, len(f.follow.GroupBy))
		for _, c := range f.follow.GroupBy {
			keys = append(keys, col(c))
		}
		var prev []byte
		err := permutation.EncodeRows(keys, n, func(row int, key []byte) {
			if row == 0 || !bytes.Equal(key, prev) {
				log.groups = append(log.groups, start+int64(row))
			}
			prev = append(prev[:0], key...)
		})
		if err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, "follow: group_by", f.table.URI())
		}
	} else if f.filter != nil {
		for i := range n {
			log.groups = append(log.groups, start+int64(i))
		}
	}
	var keep []bool
	if f.filter != nil {
		var err error
		if keep, err = f.filter.Mask(ctx, rec, f.opts.Allocator); err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, fmt.Sprintf("follow: filter of version %d of", v), f.table.URI())
		}
		log.keep(first, start, keep)
	}
	if c := f.follow.Lengths; c != "" {
		at := len(log.lengths)
		log.lengths = append(log.lengths, make([]uint32, n)...)
		if err := permutation.RowLengths(col(c), keep, log.lengths[at:]); err != nil {
			return errcode.New(errcode.InvalidArgument, "follow: lengths", f.table.URI(),
				"version %d (rows counted from row id %d), column %q: %v", v, start, c, err)
		}
	}
	return nil
}

// keptRows is the number of rows the filter has kept so far.
func (log *versionLog) keptRows() int64 {
	if len(log.keptEnds) == 0 {
		return 0
	}
	return log.keptEnds[len(log.keptEnds)-1]
}

// keep records which rows of a version, the first at row id start, the
// filter keeps (keep): the rows it drops, those of its groups from group
// first on that hold a row it keeps, and the rows kept to the version's end.
func (log *versionLog) keep(first int, start int64, keep []bool) {
	for g := first; g < len(log.groups); g++ {
		s, e := log.groups[g]-start, int64(len(keep))
		if g+1 < len(log.groups) {
			e = log.groups[g+1] - start
		}
		if slices.Contains(keep[s:e], true) {
			log.kept = append(log.kept, g)
		}
	}
	kept := log.keptRows()
	for _, k := range keep {
		log.dropped = append(log.dropped, !k)
		if k {
			kept++
		}
	}
	log.keptEnds = append(log.keptEnds, kept)
}

// snapshot returns a copy of the log; its slices only ever grow, so the
// copy stays valid.
func (f *Follower) snapshot() versionLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log
}

// Round forms the round at pos, waiting for the versions that complete it
// as FollowOptions say. When the wait times out it returns io.EOF; waits
// counts the listings that found nothing new.
func (f *Follower) Round(ctx context.Context, pos FollowPosition) (r Round, waits int64, err error) {
	r, _, waits, err = f.round(ctx, pos, true)
	return r, waits, err
}

// round is Round, or with wait false, the round at pos if the versions that
// complete it are committed as the log or one listing finds them: ok false
// when they are not.
func (f *Follower) round(ctx context.Context, pos FollowPosition, wait bool) (r Round, ok bool, waits int64, err error) {
	landed := time.Now()
	// With MaxVersionsBehindNewest, a round not decided yet is decided from
	// the newest version a listing of this call finds, when waiting: a round
	// is decided when a stream needs its first step, not when it reads
	// ahead, so that N_r is as new as it can be.
	// A follower that observes the run (Observe) reads the decision the
	// learner recorded whether it waits or not.
	undecided := func() bool {
		return (wait || f.observing) && f.follow.MaxVersionsBehindNewest != nil && pos.Newest == 0
	}
	listed := false
	for {
		log := f.snapshot()
		if pos.Head != "" && pos.After <= log.latest() && log.head(pos.After) != pos.Head {
			return Round{}, false, waits, errcode.New(errcode.Changed, "follow", f.table.URI(),
				"version %d is not the version %d the position was taken at (its files differ): the table was replaced", pos.After, pos.After)
		}
		if r, ok := f.formedAt(&pos); ok {
			return r, true, waits, nil
		}
		if undecided() && listed && log.latest() > pos.After {
			newest, err := f.decideNewest(ctx, pos, log.latest())
			if err == io.EOF && !wait {
				return Round{}, false, waits, nil // no learner has decided it yet
			}
			if err != nil {
				return Round{}, false, waits, err
			}
			pos.Newest = newest
			continue
		}
		r, ok, err := planRound(pos, &log, &f.follow, &f.opts)
		if err != nil {
			return Round{}, false, waits, errcode.Wrap(err, errcode.InvalidArgument, fmt.Sprintf("follow: round %d of", pos.Round), f.table.URI())
		}
		if ok {
			f.mu.Lock()
			f.formed = append(f.formed[max(len(f.formed)-formedRounds+1, 0):], r)
			f.mu.Unlock()
			return r, true, waits, nil
		}
		grew, err := f.refresh(ctx)
		if err != nil {
			return Round{}, false, waits, err
		}
		listed = true
		if grew {
			landed = time.Now()
			continue
		}
		log = f.snapshot()
		if log.latest() < pos.After {
			return Round{}, false, waits, errcode.New(errcode.Changed, "follow", f.table.URI(),
				"the position is after version %d, but the latest version is %d: the table was replaced", pos.After, log.latest())
		}
		if undecided() && log.latest() > pos.After {
			continue
		}
		if !wait {
			return Round{}, false, waits, nil
		}
		waits++
		if f.follow.WaitTimeout > 0 && time.Since(landed) >= f.follow.WaitTimeout {
			return Round{}, false, waits, io.EOF
		}
		t := time.NewTimer(f.follow.PollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Round{}, false, waits, errcode.Wrap(ctx.Err(), errcode.Canceled, "follow", f.table.URI())
		}
	}
}

// formedAt returns the round at pos if it was formed lately, decided or not
// at pos. A round at a position, once formed, does not change (planRound),
// and a position is decided once (decideNewest).
func (f *Follower) formedAt(pos *FollowPosition) (Round, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.formed {
		p := *pos
		if p.Newest == 0 {
			p.Newest = r.Newest
		}
		if r.FollowPosition.equal(&p) {
			return r, true
		}
	}
	return Round{}, false
}

// decision is what the table records of a round of following
// (MaxVersionsBehindNewest): the newest committed version when the first
// process to form it decided it, and the round's position, so that a
// record is never taken for another round's.
type decision struct {
	Round  int64  `json:"round"`
	After  int64  `json:"after"`
	Head   string `json:"head"`
	Newest int64  `json:"newest"`
}

// decideNewest returns N_r of the round at pos: newest, when this is the
// first process of the run to decide it, else the N_r the table recorded.
func (f *Follower) decideNewest(ctx context.Context, pos FollowPosition, newest int64) (int64, error) {
	const op = "follow"
	mine, err := json.Marshal(decision{Round: pos.Round, After: pos.After, Head: pos.Head, Newest: newest})
	if err != nil {
		return 0, errcode.Wrap(err, errcode.Internal, op, f.table.URI())
	}
	name := fmt.Sprintf("follow/%s/%020d.json", f.run, pos.Round)
	var got []byte
	if f.observing {
		if got, err = f.table.Decision(ctx, name); errcode.Of(err) == errcode.NotFound {
			return 0, io.EOF
		}
	} else {
		got, err = f.table.Decide(ctx, name, mine)
	}
	if err != nil {
		return 0, errcode.Wrap(err, errcode.Of(err), "follow: record the newest version of round "+strconv.FormatInt(pos.Round, 10)+" of", f.table.URI())
	}
	var d decision
	if err := json.Unmarshal(got, &d); err != nil || d.Round != pos.Round || d.After != pos.After || d.Head != pos.Head || d.Newest <= pos.After {
		return 0, errcode.New(errcode.Changed, op, f.table.URI(),
			"the table's record of round %d of this run (%s) is not of its position after version %d: the table was replaced, or the record rewritten",
			pos.Round, name, pos.After)
	}
	return d.Newest, nil
}

// Loader returns a loader dealing round r's steps (steps 0, … of epoch 0 are
// the round's), over a version holding the rows of the version the round
// ends at. Close it when done.
func (f *Follower) Loader(ctx context.Context, r *Round) (*Loader, error) {
	t, err := f.tableFor(ctx, r.Version)
	if err != nil {
		return nil, err
	}
	defer t.Close() // the loader holds its own reference
	return New(t, r.dealt(), f.opts)
}

// tableFor returns, retained, an open version of the table holding the rows
// of version v: the one opened last when it is v or later, else the
// follower's own table when it is (opened already, with its footers), else
// the latest version the log has read. It checks that the version holds
// the rows the log says. It opens a version without holding mu.
func (f *Follower) tableFor(ctx context.Context, v int64) (*table.Table, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errcode.New(errcode.Closed, "follow", f.table.URI(), "the follower is closed")
	}
	if f.at != nil && f.atVersion >= v {
		f.at.Retain()
		t := f.at
		f.mu.Unlock()
		return t, nil
	}
	t := f.table
	at, err := strconv.ParseInt(t.Version(), 10, 64) // a croupier table's version number
	open := err != nil || at < v || at > f.log.latest()
	if open {
		at = f.log.latest()
	}
	rows := f.log.rowsStart(at + 1)
	f.mu.Unlock()
	if open {
		if t, err = f.table.OpenVersion(ctx, at); err != nil {
			return nil, err
		}
	} else {
		t.Retain()
	}
	if t.NumRows() != rows {
		t.Close()
		return nil, errcode.New(errcode.Changed, "follow", f.table.URI(),
			"version %d holds %d rows, %d when it was first read: the table was replaced", at, t.NumRows(), rows)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		t.Close()
		return nil, errcode.New(errcode.Closed, "follow", f.table.URI(), "the follower is closed")
	case f.at != nil && f.atVersion >= at: // another call kept one as recent meanwhile
		t.Close()
	default:
		if f.at != nil {
			f.at.Close()
		}
		f.at, f.atVersion = t, at
	}
	f.at.Retain()
	return f.at, nil
}

// FollowStats describe what a follow stream has done so far.
type FollowStats struct {
	Stats
	Rounds          int64 `json:"rounds"`  // rounds formed
	Version         int64 `json:"version"` // the last version of the last round formed
	NewRows         int64 `json:"new_rows"`
	ReplayedRows    int64 `json:"replayed_rows"`
	SkippedRows     int64 `json:"skipped_rows"`
	SkippedVersions int64 `json:"skipped_versions"`
	FilteredRows    int64 `json:"filtered_rows"` // dropped by the filter
	Waits           int64 `json:"waits"`         // listings that found no new version
	WaitedOut       bool  `json:"waited_out"`    // the stream ended after WaitTimeout
}

// FollowStream makes one worker's batches of following, round after round,
// from a position. It is not safe for concurrent use; Close it when done.
type FollowStream struct {
	ctx    context.Context // of the stream's life: the rounds' streams run in it
	cancel context.CancelFunc
	f      *Follower
	so     StreamOptions
	from   int64 // the worker's first global step
	next   FollowPosition
	round  *Round // being dealt
	loader *Loader
	stream *Stream
	// ahead delivers the stream of the next round holding a step of the
	// worker, opened while the round before is dealt; nil when not asked.
	ahead chan opened
	// warming counts the goroutines reading the footers of a next round
	// (warm).
	warming sync.WaitGroup
	last    Round // of the last batch Next returned
	stats   FollowStats
	done    Stats // counters of the rounds' streams closed
	err     error
}

// Stream starts following at pos (Start, or a Round's Next: a checkpoint)
// for one worker: global steps startStep + so.Worker, + so.NumWorkers, … of
// the rounds from pos on, startStep at least pos.Step. so.Epoch and
// so.StartStep must be 0 and so.Run at most 1. The stream stops when ctx
// is canceled or Close is called.
func (f *Follower) Stream(ctx context.Context, pos FollowPosition, startStep int64, so StreamOptions) (*FollowStream, error) {
	const op = "open follow stream"
	k := max(so.NumWorkers, 1)
	switch {
	case so.Epoch != 0 || so.StartStep != 0 || so.Run > 1:
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(),
			"epoch %d, start_step %d, run %d: a follow stream has no epochs, starts at its position and deals single steps", so.Epoch, so.StartStep, so.Run)
	case so.Worker < 0 || so.Worker >= k:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "worker %d out of range [0, %d)", so.Worker, k)
	case pos.Round < 0 || pos.After < f.follow.StartVersion-1 || !slices.IsSorted(pos.Carry):
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(),
			"position round %d after version %d with %d rows carried is not one of following from version %d", pos.Round, pos.After, len(pos.Carry), f.follow.StartVersion)
	case pos.Newest != 0 && (f.follow.MaxVersionsBehindNewest == nil || pos.Newest <= pos.After):
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(),
			"position round %d after version %d decided at newest version %d is not one of this follower's", pos.Round, pos.After, pos.Newest)
	case f.opts.TokensPerStep == 0 && int64(len(pos.Carry)) >= f.opts.GlobalBatchSize:
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(),
			"position carries %d rows, a round carries fewer than global_batch_size %d", len(pos.Carry), f.opts.GlobalBatchSize)
	case startStep < pos.Step:
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(), "start step %d is before the position's step %d", startStep, pos.Step)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errcode.New(errcode.Closed, op, f.table.URI(), "the follower is closed")
	}
	f.table.Retain()
	ctx, cancel := context.WithCancel(ctx)
	return &FollowStream{ctx: ctx, cancel: cancel, f: f, so: so, from: startStep + int64(so.Worker), next: pos}, nil
}

// opened is what open did: the rounds it formed, in order, and the stream
// of the last when it holds a step of the worker (the ones before hold
// none).
type opened struct {
	rounds []Round
	loader *Loader
	stream *Stream
	waits  int64
	err    error
}

// open forms the rounds from pos on until one holds a step of the worker,
// and opens its stream after prev (see Loader.streamAfter). With wait false
// it forms only rounds whose versions are committed as one listing finds
// them, and may end with no stream and no error.
func (s *FollowStream) open(ctx context.Context, pos FollowPosition, wait bool, prev *Stream) (o opened) {
	k := int64(max(s.so.NumWorkers, 1))
	for {
		r, ok, waits, err := s.f.round(ctx, pos, wait)
		o.waits += waits
		if err != nil || !ok {
			o.err = err
			return o
		}
		o.rounds = append(o.rounds, r)
		pos = r.next
		// The worker's first step in the round: from + j·K ≥ r.Step.
		first := s.from
		if first < r.Step {
			first += (r.Step - first + k - 1) / k * k
		}
		if first >= r.Step+r.Steps {
			continue
		}
		l, err := s.f.Loader(ctx, &r)
		if err != nil {
			o.err = err
			return o
		}
		so := s.so
		so.StartStep = first - r.Step - int64(so.Worker)
		if s.f.opts.TokensPerStep != 0 {
			so.CoalesceBytes = 0 // a token-budget batch is one step
		}
		st, err := l.streamAfter(s.ctx, so, prev)
		if err != nil {
			l.Close()
			o.err = err
			return o
		}
		o.loader, o.stream = l, st
		s.warm(r.next)
		return o
	}
}

// take counts o's rounds and makes its stream, if any, the round being
// dealt.
func (s *FollowStream) take(o opened) {
	s.stats.Waits += o.waits
	for _, r := range o.rounds {
		s.stats.Rounds++
		s.stats.Version = r.Version
		s.stats.NewRows += r.NewRows
		s.stats.ReplayedRows += r.ReplayedRows
		s.stats.SkippedRows += r.SkippedRows
		s.stats.SkippedVersions += r.SkippedVersions
		s.stats.FilteredRows += r.FilteredRows
		s.next = r.next
	}
	if o.stream != nil {
		s.round, s.loader, s.stream = &o.rounds[len(o.rounds)-1], o.loader, o.stream
	}
}

// advance makes the next round holding a step of the worker the one being
// dealt: the one opened ahead, else one it forms, waiting for its versions.
func (s *FollowStream) advance(ctx context.Context) error {
	if s.ahead != nil {
		select {
		case o := <-s.ahead:
			s.ahead = nil
			// After a failure ahead, the rounds are formed again below,
			// where a failure is the stream's.
			if o.err == nil {
				if s.take(o); s.stream != nil {
					return nil
				}
			}
		case <-ctx.Done():
			return errcode.Wrap(ctx.Err(), errcode.Canceled, "follow", s.f.table.URI())
		}
	}
	o := s.open(ctx, s.next, true, nil)
	s.take(o)
	if o.err != nil {
		s.stats.WaitedOut = o.err == io.EOF
	}
	return o.err
}

// readAhead opens the next round's stream in the background once the
// stream of the round being dealt has decoded all its rows and the
// versions of the next round are committed, so that its rows are decoded
// while the last steps of this one are read; the two share one stream's
// memory budget and read-ahead (Loader.streamAfter).
func (s *FollowStream) readAhead() {
	if s.ahead != nil {
		return
	}
	select {
	case <-s.stream.decoded:
	default:
		return
	}
	s.ahead = make(chan opened, 1)
	// o is a parameter so that the deferred send, which runs after the
	// recover, sends what a panic left in it.
	go func(pos FollowPosition, prev *Stream, o opened) {
		defer func() { s.ahead <- o }()
		defer errcode.Recover(&o.err, errcode.Internal, "read the next round of", s.f.table.URI())
		o = s.open(s.ctx, pos, false, prev)
	}(s.next, s.stream, opened{})
}

// warm reads in the background the footers of the files holding the rows
// of the round at pos, if its versions are committed, once the stream of the
// round before it is open: opening its own (readAhead, once the round before
// is decoded) then waits for none of them, which on a distant store saves
// the round trips before its first rows are fetched.
func (s *FollowStream) warm(pos FollowPosition) {
	s.warming.Add(1)
	// Errors, a panic's too, are the open's to meet again.
	go func(pos FollowPosition) (err error) {
		defer s.warming.Done()
		defer errcode.Recover(&err, errcode.Internal, "read ahead the footers of", s.f.table.URI())
		r, ok, _, err := s.f.round(s.ctx, pos, false)
		if err != nil || !ok {
			return err
		}
		t, err := s.f.tableFor(s.ctx, r.Version)
		if err != nil {
			return err
		}
		defer t.Close()
		order := r.dealt()
		ids, err := order.RowIDs(s.ctx, 0, order.Len())
		if err == nil {
			t.LoadFooters(s.ctx, ids)
		}
		return err
	}(pos)
}

// closeRound closes the stream and loader of the round being dealt.
func (s *FollowStream) closeRound() error {
	if s.stream == nil {
		return nil
	}
	st := s.stream.Stats()
	s.done.Steps += st.Steps
	s.done.Rows += st.Rows
	s.done.StallTime += st.StallTime
	err := errors.Join(s.stream.Close(), s.loader.Close())
	s.round, s.loader, s.stream = nil, nil, nil
	return err
}

// Next returns the next batch: Step is a global step, and the record has
// the VersionColumn after the loader's columns. It returns io.EOF once
// WaitTimeout passed with no version to complete the next round.
func (s *FollowStream) Next(ctx context.Context) (Batch, error) {
	for s.err == nil {
		if s.stream == nil {
			if s.err = s.advance(ctx); s.err != nil {
				if errcode.Of(s.err) == errcode.Canceled && ctx.Err() != nil {
					err := s.err
					s.err = nil // a later Next tries again
					return Batch{}, err
				}
				break
			}
		}
		b, err := s.stream.Next(ctx)
		if err == io.EOF {
			s.err = s.closeRound()
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.err = err
			}
			return Batch{}, err
		}
		s.readAhead()
		rec, err := s.f.withVersions(b, s.round.Step)
		b.Record.Release()
		if err != nil {
			s.err = err
			return Batch{}, err
		}
		s.last = *s.round
		return Batch{Step: s.round.Step + b.Step, Steps: b.Steps, Record: rec, RowIDs: b.RowIDs}, nil
	}
	return Batch{}, s.err
}

// withVersions returns b's record, a batch of the round whose first step is
// first, with the VersionColumn added.
func (f *Follower) withVersions(b Batch, first int64) (arrow.RecordBatch, error) {
	if int64(len(b.RowIDs)) != b.Record.NumRows() {
		return nil, errcode.New(errcode.Internal, "follow", f.table.URI(),
			"step %d: %d rows, %d row ids", first+b.Step, b.Record.NumRows(), len(b.RowIDs))
	}
	bld := array.NewInt64Builder(f.opts.Allocator)
	defer bld.Release()
	bld.Reserve(len(b.RowIDs))
	log := f.snapshot()
	for _, id := range b.RowIDs {
		bld.UnsafeAppend(log.versionOf(id))
	}
	versions := bld.NewArray()
	defer versions.Release()
	schema := b.Record.Schema()
	fields := append(slices.Clone(schema.Fields()), arrow.Field{Name: VersionColumn, Type: arrow.PrimitiveTypes.Int64})
	cols := append(slices.Clone(b.Record.Columns()), versions)
	md := schema.Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, b.Record.NumRows()), nil
}

// All iterates over the batches until the stream ends (io.EOF, which it
// does not yield) or fails; iteration stops at the first error, which it
// yields.
func (s *FollowStream) All(ctx context.Context) iter.Seq2[Batch, error] { return all(ctx, s.Next) }

// Round returns the round of the last batch Next returned: its position is
// the checkpoint of any step in it.
func (s *FollowStream) Round() Round { return s.last }

// FollowStats returns the stream's counters.
func (s *FollowStream) FollowStats() FollowStats {
	out := s.stats
	out.Stats = s.Stats()
	return out
}

// Stats returns the counters of the round being read, with Steps, Rows and
// StallTime summed over the rounds so far.
func (s *FollowStream) Stats() Stats {
	var st Stats
	if s.stream != nil {
		st = s.stream.Stats()
	}
	st.Steps += s.done.Steps
	st.Rows += s.done.Rows
	st.StallTime += s.done.StallTime
	return st
}

// Close stops the stream and frees what it holds.
func (s *FollowStream) Close() error {
	if s.f == nil {
		return nil
	}
	s.cancel()
	err := s.closeRound()
	if s.ahead != nil {
		if o := <-s.ahead; o.stream != nil {
			err = errors.Join(err, o.stream.Close(), o.loader.Close())
		}
		s.ahead = nil
	}
	s.warming.Wait() // no open runs now to start another
	err = errors.Join(err, s.f.table.Close())
	s.f = nil
	if s.err == nil {
		s.err = errcode.New(errcode.Closed, "next", "", "stream is closed")
	}
	return err
}
