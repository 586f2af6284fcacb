package permutation

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
)

// Distributed builds. W processes, the ranks, build one permutation over a
// shared location, each scanning a run of the table's row groups and
// ordering and writing some of its buckets; the permutation is the one a
// single process builds, byte for byte, whatever W (see docs/spec.md,
// "Distributed builds"). The ranks run the same steps in lock step and
// exchange only small JSON reports between them: each step takes every
// rank's report of the step before, gathered in rank order, and gives this
// rank's next one. How the reports travel is the caller's (Python gathers
// them on a torch.distributed process group); Build is one rank alone, with
// nothing to exchange.
//
// A rank that fails reports its error in place of its step's report, so
// that every rank learns it at the next step and fails with it, naming the
// rank; no rank waits for a report that never comes but for one whose
// process dies, which the caller's collective detects. A rank whose build
// ends without a permutation, failed or left, deletes the build's whole
// spill, every rank's: no rank of a build that failed reads it again. The
// spill of a build whose every process died is its leases' (see lease.go).

// rankFault, when tests set it, is called before each step of each rank;
// the step fails with its error.
var rankFault func(rank, step int) error

// RankOptions place a rank among the ranks of a build.
type RankOptions struct {
	Rank, World int
}

// A Rank is one process of a distributed build. Call Next until it returns
// no report, then Permutations; Close, whether it succeeded or not.
type Rank struct {
	b     *builder
	uri   string
	loc   *store.Location // nil once the permutation holds it
	start time.Time
	steps []func(ctx context.Context, reports []json.RawMessage) (any, error)
	next  int
	token string // names the build's spill, rank 0's choice

	scanned, sp *spill // this rank's spill as scanned, and as routed to buckets
	lease       *lease // this rank's, while it has a spill
	all         spills // every rank's spill
	ord         ordering
	m           Manifest
	p           *Permutations
	failed      error // this rank's error, reported at its step
}

// NewRank checks the build and opens its location; nothing is written
// before the first step.
func NewRank(ctx context.Context, t *table.Table, spec Spec, uri string, opts BuildOptions, ro RankOptions) (*Rank, error) {
	const op = "build permutation"
	if ro.World < 1 || ro.Rank < 0 || ro.Rank >= ro.World {
		return nil, errcode.New(errcode.InvalidArgument, op, uri, "rank %d of %d ranks", ro.Rank, ro.World)
	}
	b, err := newBuilder(ctx, t, spec, opts)
	if err != nil {
		return nil, err
	}
	b.rank, b.world = ro.Rank, ro.World
	b.jobs, _ = rankJobs(t, ro.Rank, ro.World)
	loc, err := store.OpenCreate(ctx, uri)
	if err != nil {
		return nil, err
	}
	r := &Rank{b: b, uri: uri, loc: loc, start: time.Now()}
	r.steps = append(r.steps, r.hello, r.scan)
	if r.reroutes() {
		r.steps = append(r.steps, r.route)
	}
	r.steps = append(r.steps, r.digest, r.write, r.commit, r.open)
	return r, nil
}

// reroutes reports whether the rank's rows reach their buckets only once
// every rank has counted its own: with clumps, a row's bucket depends on
// its position in its split, so on the rows of the ranks before.
func (r *Rank) reroutes() bool {
	sh := r.b.spec.Shuffle
	return r.b.world > 1 && r.b.numBuckets() > 1 && sh != nil && sh.ClumpSize > 1
}

// rankReport is what a rank sends the others after each step: its report,
// or its error.
type rankReport struct {
	Rank   int             `json:"rank"`
	Step   int             `json:"step"`
	Report json.RawMessage `json:"report,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   errcode.Code    `json:"code,omitempty"`
}

// Next takes every rank's report of the step before, in rank order (nil
// before the first step), runs the next step, and returns this rank's report
// to give every rank. It returns no report once the build is committed, and
// an error, the same on every rank, once a rank failed; then the build is
// over. A step that fails is reported, not returned, so that every rank
// learns of it at the next step.
func (r *Rank) Next(ctx context.Context, gathered [][]byte) ([]byte, error) {
	reports, err := r.check(gathered)
	if err != nil {
		r.abandon(ctx)
		if r.p != nil { // committed, but another rank failed to open it
			r.p.Close()
			r.p = nil
		}
		return nil, err
	}
	if r.next == len(r.steps) {
		return nil, nil
	}
	step := r.next
	r.next++
	out := rankReport{Rank: r.b.rank, Step: step}
	var data any
	if rankFault != nil {
		err = rankFault(r.b.rank, step)
	}
	if err == nil {
		err = r.lease.check()
	}
	if err == nil {
		data, err = r.steps[step](ctx, reports)
	}
	if err == nil {
		out.Report, err = json.Marshal(data)
	}
	if err != nil {
		out.Error, out.Code = err.Error(), errcode.Of(err)
		r.failed = err
	}
	return json.Marshal(out)
}

// check decodes every rank's report of the last step and returns the error
// of the first rank that failed, naming it.
func (r *Rank) check(gathered [][]byte) ([]json.RawMessage, error) {
	const op = "build permutation"
	if r.next == 0 {
		return nil, nil
	}
	if len(gathered) != r.b.world {
		return nil, errcode.New(errcode.Internal, op, r.uri, "%d reports for %d ranks", len(gathered), r.b.world)
	}
	out := make([]json.RawMessage, len(gathered))
	for i, g := range gathered {
		var rep rankReport
		if err := json.Unmarshal(g, &rep); err != nil || rep.Rank != i || rep.Step != r.next-1 {
			return nil, errcode.New(errcode.Internal, op, r.uri, "report %d of step %d is not rank %d's of that step", i, r.next-1, i)
		}
		if rep.Error != "" {
			if r.b.world == 1 {
				return nil, r.failed
			}
			if i == r.b.rank {
				return nil, &errcode.Error{Code: rep.Code, Op: op, Path: r.uri,
					Err: fmt.Errorf("rank %d of %d failed: %w", i, r.b.world, r.failed)}
			}
			return nil, errcode.New(rep.Code, op, r.uri, "rank %d of %d failed: %s", i, r.b.world, rep.Error)
		}
		out[i] = rep.Report
	}
	return out, nil
}

// abandon ends the build: it removes this rank's spill and, unless the
// build committed, every rank's, which no rank reads any more: each rank
// that learns of a failure, or leaves, deletes the spill that the ranks
// still alive wrote, once its own writes have ended.
func (r *Rank) abandon(ctx context.Context) {
	r.lease.end(ctx)
	r.scanned.remove(ctx)
	if r.ord != nil {
		r.ord.release(ctx)
	}
	r.sp.remove(ctx)
	r.lease, r.scanned, r.sp, r.ord = nil, nil, nil, nil
	if r.token != "" && r.p == nil && r.loc != nil {
		removePrefix(ctx, r.loc, path.Join(r.loc.Key, spillDir, r.token)+"/")
	}
	r.next = len(r.steps)
}

// Permutations returns the permutation built, once Next returned no report.
func (r *Rank) Permutations() *Permutations { return r.p }

// Close removes what is left of this rank's spill and releases the
// location unless the permutation holds it. The permutation stays open.
func (r *Rank) Close() error {
	r.abandon(context.Background())
	if r.loc != nil {
		r.loc.Close()
		r.loc = nil
	}
	return nil
}

type helloReport struct {
	Inputs string `json:"inputs"` // digest of what every rank must agree on
	Token  string `json:"token"`
}

// hello reports the inputs of this rank and, from rank 0, the build's token.
func (r *Rank) hello(context.Context, []json.RawMessage) (any, error) {
	var token [8]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, "build permutation", r.uri)
	}
	in, err := json.Marshal(struct {
		Table table.Pin
		Spec  Spec
		URI   string
		World int
	}{r.b.t.Pin(), r.b.spec, r.uri, r.b.world})
	sum := sha256.Sum256(in)
	return helloReport{Inputs: hex.EncodeToString(sum[:]), Token: hex.EncodeToString(token[:])}, err
}

type scanReport struct {
	Kept    int64       `json:"kept"`
	Skipped int64       `json:"skipped"`
	Spill   spillReport `json:"spill"`
}

// spillPrefix returns the prefix of this rank's spill: under the build's
// token, which no other build's spill uses, the rank's own.
func (r *Rank) spillPrefix(stage string) string {
	return path.Join(r.loc.Key, spillDir, r.token, fmt.Sprint(r.b.rank)+stage)
}

// scan checks that every rank builds the same permutation and scans this
// rank's row groups into its spill.
func (r *Rank) scan(ctx context.Context, reports []json.RawMessage) (any, error) {
	hellos, err := decodeReports[helloReport](reports)
	if err != nil {
		return nil, err
	}
	for i, h := range hellos {
		if h.Inputs != hellos[0].Inputs {
			return nil, errcode.New(errcode.InvalidArgument, "build permutation", r.uri,
				"rank %d builds another permutation than rank 0: the ranks must give the same table version, spec, URI and number of ranks", i)
		}
	}
	b := r.b
	r.token = hellos[0].Token
	width := 8
	if b.t.NumRows() <= narrowRows {
		width = 4
	}
	buckets, stage := b.numBuckets(), ""
	if r.reroutes() {
		buckets, stage = 1, "-scanned"
	}
	sp := newSpill(ctx, r.loc, r.spillPrefix(stage), b.numParts(), buckets, width, b.spec.Lengths != "", len(b.spec.GroupBy) > 0, b.opts.Memory)
	sp.claim = func() error { return r.claim(ctx) }
	r.scanned = sp
	if err := b.scan(ctx, newRouter(b, sp, make([]int64, b.numParts()))); err != nil {
		return nil, err
	}
	if err := sp.finish(b.world > 1); err != nil {
		return nil, err
	}
	if !r.reroutes() {
		r.sp, r.scanned = sp, nil
	}
	if err := r.shareKeys(ctx); err != nil {
		return nil, err
	}
	return scanReport{Kept: b.stats.kept.Load(), Skipped: b.stats.skipped, Spill: sp.report()}, nil
}

// claim takes this rank's lease on the build's spill, before its first
// spill object is written: a build that spills nothing writes no lease.
func (r *Rank) claim(ctx context.Context) error {
	if r.lease != nil {
		return nil
	}
	l, err := startLease(ctx, r.loc, leaseKey(r.loc, r.token, r.b.rank))
	r.lease = l
	return err
}

// route sends this rank's rows to their buckets, knowing from the others'
// reports the position in its split of each part's first row.
func (r *Rank) route(ctx context.Context, reports []json.RawMessage) (any, error) {
	scans, err := decodeReports[scanReport](reports)
	if err != nil {
		return nil, err
	}
	b, from := r.b, r.scanned
	at := make([]int64, b.numParts())
	for _, s := range scans[:b.rank] {
		for p := range at {
			at[p] += s.Spill.Rows[p]
		}
	}
	r.sp = newSpill(ctx, r.loc, r.spillPrefix(""), b.numParts(), b.numBuckets(), from.width, from.lengths, from.groups, b.opts.Memory)
	r.sp.claim = func() error { return r.claim(ctx) }
	rt := newRouter(b, r.sp, at)
	for p := range at {
		err := from.read(ctx, p, 0, func(records []byte) error {
			for i := 0; i < len(records); i += from.record {
				id, length, number := from.decodeRecord(records[i : i+from.record])
				if err := rt.route(p, id, length, number); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := r.sp.finish(true); err != nil {
		return nil, err
	}
	r.scanned.remove(ctx)
	r.scanned = nil
	me := scans[b.rank]
	me.Spill = r.sp.report()
	return me, nil
}

// digest orders the chunks this rank orders and reports their digests.
func (r *Rank) digest(ctx context.Context, reports []json.RawMessage) (any, error) {
	scans, err := decodeReports[scanReport](reports)
	if err != nil {
		return nil, err
	}
	b := r.b
	var ranks []*spill
	var kept, skipped int64
	for i, s := range scans {
		kept, skipped = kept+s.Kept, skipped+s.Skipped
		if i == b.rank {
			ranks = append(ranks, r.sp)
			continue
		}
		sp, err := remoteSpill(r.loc, s.Spill)
		if err != nil {
			return nil, err
		}
		ranks = append(ranks, sp)
	}
	_, groups := rankJobs(b.t, 0, 1)
	b.stats.rows, b.stats.groups, b.stats.skipped = b.t.NumRows(), groups, skipped
	b.stats.kept.Store(kept)
	r.all = newSpills(ranks)
	if err := r.gatherKeys(ctx, scans); err != nil {
		return nil, err
	}
	r.ord = newOrdering(b, r.all)
	d, err := r.ord.digest(ctx)
	return d, errcode.Wrap(err, errcode.Internal, "build permutation", r.uri)
}

// write assembles the manifest from every rank's digests and writes the
// chunks this rank orders.
func (r *Rank) write(ctx context.Context, reports []json.RawMessage) (any, error) {
	all, err := decodeReports[digests](reports)
	if err != nil {
		return nil, err
	}
	if r.m, err = r.b.manifest(r.all, all); err != nil {
		return nil, err
	}
	return struct{}{}, errcode.Wrap(r.ord.write(ctx, r.loc, r.m), errcode.Internal, "build permutation", r.uri)
}

// commit removes the spill, which every rank has read, and its lease, and
// has rank 0 write the manifest: the permutation exists once every rank
// wrote its chunks. Rank 0 then deletes the spills that builds at the
// location left when all their processes died (see sweepSpills).
func (r *Rank) commit(ctx context.Context, _ []json.RawMessage) (any, error) {
	r.ord.release(ctx)
	r.sp.remove(ctx)
	r.lease.end(ctx)
	r.sp, r.lease, r.ord = nil, nil, nil
	if r.b.rank != 0 {
		return struct{}{}, nil
	}
	if err := writeManifest(ctx, r.loc, r.m); err != nil {
		return nil, err
	}
	loc := r.loc
	r.loc = nil // commit closes it, or the permutation holds it
	p, err := r.b.commit(ctx, loc, r.m, r.start)
	r.p = p
	if err == nil {
		r.sweep(ctx, loc)
	}
	return struct{}{}, err
}

// sweep deletes the spills of dead builds at loc, measuring their age
// against the build record just written; a failure leaves them for the
// next build, and does not fail this one.
func (r *Rank) sweep(ctx context.Context, loc *store.Location) {
	rec, err := loc.Stat(ctx, path.Join(loc.Key, buildKey))
	if err == nil && !rec.ModTime.IsZero() {
		sweepSpills(ctx, loc, r.token, rec.ModTime)
	}
}

// open opens the permutation rank 0 committed, on the other ranks.
func (r *Rank) open(ctx context.Context, _ []json.RawMessage) (any, error) {
	if r.b.rank == 0 {
		return struct{}{}, nil
	}
	loc := r.loc
	r.loc = nil
	p, err := open(ctx, loc, table.OpenOptions{BlockCache: r.b.t.BlockCache()})
	if err != nil {
		loc.Close()
		return nil, err
	}
	if p.ID() != r.m.ID {
		p.Close()
		return nil, errcode.New(errcode.Changed, "build permutation", r.uri,
			"rank 0 committed %s, not this build's %s", p.ID(), r.m.ID)
	}
	r.p = p
	return struct{}{}, nil
}

// decodeReports decodes every rank's report of a step.
func decodeReports[T any](reports []json.RawMessage) ([]T, error) {
	out := make([]T, len(reports))
	for i, rep := range reports {
		if err := json.Unmarshal(rep, &out[i]); err != nil {
			return nil, errcode.New(errcode.Internal, "build permutation", "",
				"rank %d's report: %v: %s", i, err, strings.TrimSpace(string(rep)))
		}
	}
	return out, nil
}

// ordering orders the splits from every rank's spill, whatever the layout
// of its records.
type ordering interface {
	digest(ctx context.Context) (digests, error)
	write(ctx context.Context, loc *store.Location, m Manifest) error
	release(ctx context.Context)
}

func (o *orderer[T]) digest(ctx context.Context) (digests, error) { return digest(ctx, o.b, o) }

func (o *orderer[T]) write(ctx context.Context, loc *store.Location, m Manifest) error {
	return write(ctx, o.b, loc, o, m)
}

// newOrdering returns the orderer of sp's records: their ids and lengths
// (a group's number, where records hold one, is read from the record).
func newOrdering(b *builder, sp spills) ordering {
	switch {
	case sp.width == 4 && !sp.lengths:
		return &orderer[uint32]{b: b, sp: sp, l: narrowIDs}
	case sp.width == 4:
		return &orderer[uint64]{b: b, sp: sp, l: packedIDs}
	case !sp.lengths:
		return &orderer[uint64]{b: b, sp: sp, l: wideIDs}
	}
	return &orderer[wideRecord]{b: b, sp: sp, l: wideLengths}
}
