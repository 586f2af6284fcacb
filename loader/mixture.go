package loader

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/jsonargs"
)

// A Mixture interleaves the steps of several loaders (its sources) by
// weight, deterministically (docs/concepts.md, "Mixtures"). A training mix
// (70 % web, 20 % code, 10 % math, moving to more math later) must be as
// reproducible as one dataset: which source a step draws from may not
// depend on the world size, the timing of reads or a restart. Here it is a
// pure function of the seed, the step and the weights at that step:
//
//   - mixture step t has Slots slots; slot j draws u(t, j), the first 8
//     bytes (little endian) of SHA-256 of "croupier/mixture\x00<seed>\x00<t>\x00<j>"
//     (decimal numbers) divided by 2⁶⁴;
//   - the weights at t are the schedule's, linear between its points
//     (w(t) = w_a + (w_b − w_a)·(t − t_a)/(t_b − t_a) for points t_a ≤ t < t_b),
//     those of the last point after it; sources out of the draw (exhausted,
//     under ExhaustedRenormalize) weigh 0;
//   - the slot goes to the first source i of positive weight whose
//     cumulative weight w_0 + … + w_i exceeds u·(w_0 + … + w_n), the total
//     summed exactly and rounded once (Python's math.fsum), the cumulative
//     weights summed in order in float64 (the last source of positive weight
//     when none does);
//   - it is filled with that source's next step, in the source's own dealing
//     order, so its rows are the same at every world size.
//
// A source whose epoch has no step left when a slot draws it is exhausted:
// OnExhausted says what happens then. A Mixture holds no position: the
// caller keeps a MixturePosition and passes it (Next, Stream, Checkpoint).
type Mixture struct {
	sources []Source
	opts    MixtureOptions
	points  []MixturePoint // the weights at step 0, then the schedule
}

// What a Mixture does when a slot draws a source whose epoch has no step left.
const (
	ExhaustedStop        = "stop"        // the iteration ends before that step
	ExhaustedCycle       = "cycle"       // the slot takes the first step of the source's next epoch
	ExhaustedRenormalize = "renormalize" // the source leaves the draw, and the slot draws again with the same u among the others
)

// ExhaustedPolicies are the values of MixtureOptions.OnExhausted.
var ExhaustedPolicies = []string{ExhaustedStop, ExhaustedCycle, ExhaustedRenormalize}

// MixtureOptions are the mixing parameters; JSON names match the Python
// keyword arguments of croupier.Mixture.
type MixtureOptions struct {
	Seed uint64 `json:"seed"`
	// Weights are the sources' weights at step 0, one each, finite and ≥ 0,
	// not all 0.
	Weights []float64 `json:"weights"`
	// Schedule holds points after step 0, steps increasing: the weights move
	// linearly from one point to the next and stay at the last.
	Schedule    []MixturePoint `json:"schedule"`
	OnExhausted string         `json:"on_exhausted"` // one of ExhaustedPolicies; "" means ExhaustedStop
	Slots       int64          `json:"slots"`        // slots of each mixture step; 0 means 1
}

// MixturePoint is a point of a weight schedule: the weights at Step. Its
// JSON is [step, [weights]], as Python's state dicts write it.
type MixturePoint struct {
	Step    int64
	Weights []float64
}

// MarshalJSON writes [step, [weights]].
func (p MixturePoint) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{p.Step, p.Weights})
}

// UnmarshalJSON reads [step, [weights]].
func (p *MixturePoint) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if jsonargs.Unmarshal(b, &pair, false) != nil || len(pair) != 2 {
		return fmt.Errorf("a schedule point is [step, [weights]], got %s", b)
	}
	if err := jsonargs.Unmarshal(pair[0], &p.Step, false); err != nil {
		return fmt.Errorf("a schedule point's step: %w", err)
	}
	if err := jsonargs.Unmarshal(pair[1], &p.Weights, false); err != nil {
		return fmt.Errorf("a schedule point's weights: %w", err)
	}
	return nil
}

// MixturePosition is how far a mixture has dealt: its next step, each
// source's cursor, and which sources are out of the draw.
type MixturePosition struct {
	Step    int64            `json:"steps_consumed"` // mixture steps dealt
	Sources []SourcePosition `json:"sources"`
	// OutOfDraw marks the sources taken out of the draw (ExhaustedRenormalize)
	// in this iteration.
	OutOfDraw []bool `json:"out_of_draw"`
}

// MixtureSlot is what fills a slot: source Source's step (see SourceStep):
// step Step of epoch Epoch of a Loader, global step Step of a Follower in
// its round Epoch, or mixture step Step of a Mixture (Epoch 0), whose own
// slots are Slots (nil for every other source).
type MixtureSlot struct {
	Source int           `json:"source"`
	Epoch  int64         `json:"epoch"`
	Step   int64         `json:"step"`
	Slots  []MixtureSlot `json:"slots,omitempty"`
}

// NewMixture returns the mixture of sources (loaders, followers, in any
// mix) of one rank: the same Rank and WorldSize. It does not own them:
// close them after the mixture's streams. Bad options are InvalidArgument
// naming the option and the value.
func NewMixture(sources []Source, opts MixtureOptions) (*Mixture, error) {
	const op = "new mixture"
	if len(sources) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "a mixture needs at least one source")
	}
	for i, src := range sources {
		a, b := src.Describe(), sources[0].Describe()
		if a.Rank != b.Rank || a.WorldSize != b.WorldSize {
			return nil, errcode.New(errcode.InvalidArgument, op, a.TableURI,
				"source %d is rank %d of %d, source 0 rank %d of %d: a mixture deals one rank", i, a.Rank, a.WorldSize, b.Rank, b.WorldSize)
		}
	}
	if opts.OnExhausted == "" {
		opts.OnExhausted = ExhaustedStop
	}
	if !slices.Contains(ExhaustedPolicies, opts.OnExhausted) {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "on_exhausted=%q is not one of %v", opts.OnExhausted, ExhaustedPolicies)
	}
	if opts.Slots == 0 {
		opts.Slots = 1
	}
	if opts.Slots < 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "slots is %d; it must be at least 1", opts.Slots)
	}
	opts.Weights, opts.Schedule = slices.Clone(opts.Weights), slices.Clone(opts.Schedule)
	points := []MixturePoint{{Step: 0, Weights: opts.Weights}}
	for _, p := range opts.Schedule {
		points = append(points, MixturePoint{Step: p.Step, Weights: slices.Clone(p.Weights)})
	}
	for k, p := range points {
		if len(p.Weights) != len(sources) {
			return nil, errcode.New(errcode.InvalidArgument, op, "",
				"the weights at step %d are %d, for %d sources", p.Step, len(p.Weights), len(sources))
		}
		for _, w := range p.Weights {
			if !(w >= 0 && w <= math.MaxFloat64) {
				return nil, errcode.New(errcode.InvalidArgument, op, "",
					"the weights at step %d must be finite numbers >= 0, got %v", p.Step, p.Weights)
			}
		}
		if math.IsInf(exactSum(p.Weights), 1) {
			return nil, errcode.New(errcode.InvalidArgument, op, "", "the weights at step %d sum past the largest float64: %v", p.Step, p.Weights)
		}
		if k > 0 && p.Step <= points[k-1].Step {
			return nil, errcode.New(errcode.InvalidArgument, op, "",
				"schedule steps must increase after step 0, got %d after %d", p.Step, points[k-1].Step)
		}
	}
	if exactSum(points[0].Weights) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "the weights at step 0 are all 0")
	}
	return &Mixture{sources: slices.Clone(sources), opts: opts, points: points}, nil
}

// Options returns the options with defaults filled in.
func (m *Mixture) Options() MixtureOptions { return m.opts }

// MaxRecords returns the most records a step of m holds
// (MixtureBatch.Records): its slots, times the most records a step of a
// mixture among its sources holds (1 for every other source).
func (m *Mixture) MaxRecords() int64 {
	most := int64(1)
	for _, src := range m.sources {
		if inner, ok := src.(*Mixture); ok {
			most = max(most, inner.MaxRecords())
		}
	}
	return m.opts.Slots * most
}

// Sources returns the mixture's sources, in the order of the weights.
func (m *Mixture) Sources() []Source { return slices.Clone(m.sources) }

// Start returns the position before the first step, every source at its
// beginning (Source.Begin).
func (m *Mixture) Start() MixturePosition {
	pos := MixturePosition{OutOfDraw: make([]bool, len(m.sources))}
	for _, src := range m.sources {
		pos.Sources = append(pos.Sources, src.Begin())
	}
	return pos
}

// WeightsAt returns the schedule's weights at step.
func (m *Mixture) WeightsAt(step int64) []float64 {
	after := slices.IndexFunc(m.points, func(p MixturePoint) bool { return p.Step > step })
	if after < 0 {
		after = len(m.points)
	}
	if after == len(m.points) {
		return slices.Clone(m.points[after-1].Weights)
	}
	a, b := m.points[after-1], m.points[after]
	w := make([]float64, len(a.Weights))
	for i := range w {
		// Each operation rounded on its own, as Python evaluates it: an
		// explicit conversion keeps the compiler from fusing them.
		w[i] = a.Weights[i] + float64(float64((b.Weights[i]-a.Weights[i])*float64(step-a.Step))/float64(b.Step-a.Step))
	}
	return w
}

// mixtureDraw is u(step, slot) of seed: the uniform number in [0, 1] (1
// only when rounding to float64 carries it there) that decides the slot.
func mixtureDraw(seed uint64, step, slot int64) float64 {
	sum := sha256.Sum256([]byte("croupier/mixture\x00" + strconv.FormatUint(seed, 10) + "\x00" +
		strconv.FormatInt(step, 10) + "\x00" + strconv.FormatInt(slot, 10)))
	return float64(binary.LittleEndian.Uint64(sum[:8])) / (1 << 64)
}

// exactSum is the sum of ws rounded once to float64 (Python's math.fsum):
// 2,200 bits hold any sum of float64s of one sign exactly.
func exactSum(ws []float64) float64 {
	total := new(big.Float).SetPrec(2200)
	for _, w := range ws {
		total.Add(total, new(big.Float).SetFloat64(w))
	}
	f, _ := total.Float64()
	return f
}

// pickSource returns the source draw u selects among weights, or false when
// every weight is 0.
func pickSource(u float64, weights []float64) (int, bool) {
	total := exactSum(weights)
	if total <= 0 {
		return 0, false
	}
	cumulative, last := 0.0, 0
	for i, w := range weights {
		cumulative += w
		if w > 0 {
			if cumulative > u*total {
				return i, true
			}
			last = i
		}
	}
	return last, true // u·total rounded up to the total
}

// Next returns the slots of the mixture step at pos and the position after
// it. When the step cannot be filled (a source is exhausted under
// ExhaustedStop, or every source under ExhaustedRenormalize) the iteration
// ends there: ok is false, no step is dealt, and next is where the next
// iteration starts: each source whose epoch ended moves to step 0 of its
// next epoch, and every source is back in the draw.
func (m *Mixture) Next(ctx context.Context, pos MixturePosition) (slots []MixtureSlot, next MixturePosition, ok bool, err error) {
	steps, next, ok, err := m.next(ctx, pos, true)
	for _, d := range steps {
		slots = append(slots, d.slot())
	}
	return slots, next, ok, err
}

// drawn is a slot's source and the source's step that fills it.
type drawn struct {
	source int
	step   SourceStep
}

// slot is what the slot holds, as Next names it.
func (d drawn) slot() MixtureSlot {
	s := MixtureSlot{Source: d.source, Epoch: d.step.Epoch, Step: d.step.Step}
	for _, inner := range d.step.slots {
		s.Slots = append(s.Slots, inner.slot())
	}
	return s
}

// next is Next, its slots with each source's step; with wait false, a step
// that would wait for a source's rows is ErrNotReady (Source.StepAt).
func (m *Mixture) next(ctx context.Context, pos MixturePosition, wait bool) (slots []drawn, next MixturePosition, ok bool, err error) {
	if err := m.checkPosition(pos); err != nil {
		return nil, pos, false, err
	}
	next = MixturePosition{Step: pos.Step, Sources: slices.Clone(pos.Sources), OutOfDraw: slices.Clone(pos.OutOfDraw)}
	for j := range m.opts.Slots {
		d, ok, err := m.choose(ctx, &next, pos.Step, j, wait)
		if err != nil {
			return nil, pos, false, err
		}
		if !ok {
			end, err := m.End(ctx, pos)
			return nil, end, false, err
		}
		slots = append(slots, d)
	}
	next.Step++
	return slots, next, true, nil
}

// choose returns the source that fills slot j of step now and its step,
// moving pos past it, a cycled source to its next epoch and taking
// exhausted ones out of the draw, or false when the iteration ends.
func (m *Mixture) choose(ctx context.Context, pos *MixturePosition, step, j int64, wait bool) (drawn, bool, error) {
	u := mixtureDraw(m.opts.Seed, step, j)
	for {
		weights := m.WeightsAt(step)
		for i, out := range pos.OutOfDraw {
			if out {
				weights[i] = 0
			}
		}
		i, ok := pickSource(u, weights)
		if !ok {
			return drawn{}, false, nil
		}
		src, c := m.sources[i], &pos.Sources[i]
		st, next, ok, err := src.StepAt(ctx, *c, wait)
		if err != nil {
			return drawn{}, false, sourceError(err, i)
		}
		if ok {
			*c = next
			return drawn{i, st}, true, nil
		}
		switch m.opts.OnExhausted {
		case ExhaustedStop:
			return drawn{}, false, nil
		case ExhaustedCycle:
			renewed, ok, err := src.Renew(ctx, *c)
			if err != nil || !ok {
				return drawn{}, false, sourceError(err, i)
			}
			if st, next, ok, err = src.StepAt(ctx, renewed, wait); err != nil || !ok {
				return drawn{}, false, sourceError(err, i)
			}
			*c = next
			return drawn{i, st}, true, nil
		}
		pos.OutOfDraw[i] = true
	}
}

// sourceError names source i in err, i its index or its path through
// nested mixtures ("1/0"); nil stays nil.
func sourceError[I int | string](err error, i I) error {
	if err == nil || err == ErrNotReady {
		return err
	}
	return errcode.Wrap(err, errcode.Of(err), "mixture", fmt.Sprintf("source %v", i))
}

// End returns where the iteration after one that ended at pos starts: each
// source with no step left renewed (Source.Renew), every source back in the
// draw. It waits for nothing, so a caller whose iteration ended as a
// followed source's wait timed out need not wait again to learn it.
func (m *Mixture) End(ctx context.Context, pos MixturePosition) (MixturePosition, error) {
	if err := m.checkPosition(pos); err != nil {
		return pos, err
	}
	next := MixturePosition{Step: pos.Step, Sources: slices.Clone(pos.Sources), OutOfDraw: make([]bool, len(m.sources))}
	for i, c := range next.Sources {
		renewed, ok, err := m.sources[i].Renew(ctx, c)
		if err != nil && !errors.Is(err, errLastEpoch) { // a source at its last epoch stays exhausted
			return pos, sourceError(err, i)
		}
		if ok {
			next.Sources[i] = renewed
		}
	}
	return next, nil
}

// checkPosition checks that pos has a cursor and a draw mark for each
// source, and no negative number.
func (m *Mixture) checkPosition(pos MixturePosition) error {
	if len(pos.Sources) != len(m.sources) || len(pos.OutOfDraw) != len(m.sources) {
		return errcode.New(errcode.InvalidArgument, "mixture", "",
			"the position has %d sources and %d out_of_draw marks, for %d sources", len(pos.Sources), len(pos.OutOfDraw), len(m.sources))
	}
	if pos.Step < 0 {
		return errcode.New(errcode.InvalidArgument, "mixture", "", "the position's steps_consumed %d is negative", pos.Step)
	}
	for i, c := range pos.Sources {
		if c.Epoch < 0 || c.StepsConsumed < 0 {
			return errcode.New(errcode.InvalidArgument, "mixture", m.sources[i].Describe().TableURI,
				"source %d is at epoch %d, step %d: both must be >= 0", i, c.Epoch, c.StepsConsumed)
		}
	}
	return nil
}

// MixtureCheckpointFormat is the format of the checkpoints
// Mixture.Checkpoint makes (Python's croupier.mixture.STATE_FORMAT).
const MixtureCheckpointFormat = 1

// MixtureCheckpoint is a mixture run's position: what Python's
// Mixture.state_dict() returns, key for key. It holds the mixing parameters
// and each source's checkpoint (the source's identity, its epoch and the
// steps of it dealt), which must match the mixture a run resumes with, and
// the position. Like a Checkpoint, it fits any world size.
type MixtureCheckpoint struct {
	Format int    `json:"format"`
	Seed   uint64 `json:"seed"`
	// Schedule is every point of the weights, step 0's first.
	Schedule      []MixturePoint `json:"schedule"`
	OnExhausted   string         `json:"on_exhausted"`
	Slots         int64          `json:"slots"`
	StepsConsumed int64          `json:"steps_consumed"`
	OutOfDraw     []bool         `json:"out_of_draw"`
	// Sources are the sources' checkpoints (Source.Save): a Checkpoint of
	// a Loader, a FollowCheckpoint of a Follower.
	Sources []json.RawMessage `json:"sources"`
}

// Checkpoint returns the checkpoint of a run at pos.
func (m *Mixture) Checkpoint(pos MixturePosition) (MixtureCheckpoint, error) {
	if err := m.checkPosition(pos); err != nil {
		return MixtureCheckpoint{}, err
	}
	c := MixtureCheckpoint{Format: MixtureCheckpointFormat, Seed: m.opts.Seed, Schedule: m.points,
		OnExhausted: m.opts.OnExhausted, Slots: m.opts.Slots, StepsConsumed: pos.Step, OutOfDraw: slices.Clone(pos.OutOfDraw)}
	for i, src := range m.sources {
		saved, err := src.Save(pos.Sources[i])
		if err != nil {
			return MixtureCheckpoint{}, sourceError(err, i)
		}
		c.Sources = append(c.Sources, saved)
	}
	return c, nil
}

// ParseMixtureCheckpoint decodes a mixture checkpoint from JSON, as
// Python's json.dump(mix.state_dict()) or json.Marshal of a
// MixtureCheckpoint writes it. where names it in errors, which are
// InvalidArgument.
func ParseMixtureCheckpoint(data []byte, where string) (MixtureCheckpoint, error) {
	const op = "read mixture checkpoint"
	var c MixtureCheckpoint
	if err := jsonargs.Decode(data, &c, true, op, where); err != nil {
		return c, err
	}
	if c.Format != MixtureCheckpointFormat {
		return c, errcode.New(errcode.InvalidArgument, op, where,
			"mixture state dict format is %d, this croupier reads format %d", c.Format, MixtureCheckpointFormat)
	}
	return c, nil
}

// Resume checks that c was made by a run of this mixture (the same seed,
// schedule, policy, slots and sources, each source as Loader.Resume checks
// it) and returns its position. Errors are InvalidArgument and name the
// field and both values, and the source.
func (m *Mixture) Resume(ctx context.Context, c MixtureCheckpoint) (MixturePosition, error) {
	const op = "resume mixture"
	mine, err := m.Checkpoint(m.Start())
	if err != nil {
		return MixturePosition{}, err
	}
	schedule := func(ps []MixturePoint) string {
		b, _ := json.Marshal(ps)
		return string(b)
	}
	if f, differ := mismatch(
		checkpointField{"format", c.Format, mine.Format},
		checkpointField{"seed", c.Seed, mine.Seed},
		checkpointField{"schedule", schedule(c.Schedule), schedule(mine.Schedule)},
		checkpointField{"on_exhausted", c.OnExhausted, mine.OnExhausted},
		checkpointField{"slots", c.Slots, mine.Slots},
	); differ {
		return MixturePosition{}, errcode.New(errcode.InvalidArgument, op, "",
			"mixture state dict %s is %s but this mixture's %s is %s", f.name, quote(f.theirs), f.name, quote(f.ours))
	}
	if len(c.Sources) != len(m.sources) || len(c.OutOfDraw) != len(m.sources) {
		return MixturePosition{}, errcode.New(errcode.InvalidArgument, op, "",
			"mixture state dict has %d sources and %d out_of_draw marks, this mixture %d sources", len(c.Sources), len(c.OutOfDraw), len(m.sources))
	}
	pos := MixturePosition{Step: c.StepsConsumed, OutOfDraw: slices.Clone(c.OutOfDraw)}
	for i, sc := range c.Sources {
		sp, err := m.sources[i].Restore(ctx, sc, RestoreOptions{})
		if err != nil {
			return MixturePosition{}, errcode.Wrap(err, errcode.InvalidArgument, op, fmt.Sprintf("mixture source %d", i))
		}
		pos.Sources = append(pos.Sources, sp)
	}
	if c.StepsConsumed < 0 {
		return MixturePosition{}, errcode.New(errcode.InvalidArgument, op, "", "mixture state dict steps_consumed %d is negative", c.StepsConsumed)
	}
	return pos, nil
}
