package loader

import (
	"context"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
)

// Batches read ahead are counted by their real bytes.
//
// A stream reads up to ReadAhead batches ahead of its consumer, and its
// budget sets a share aside for them at the guessed size of a step. A step
// that holds a row hundreds of times the mean is as large as that row: four
// such steps read ahead held four of them. So each read, once the rows of
// its batch are kept, waits for its turn (reads are admitted in step order:
// a later batch never takes the room an earlier one waits for, which the
// consumer takes first) and for room in the share, counted by the bytes of
// the batch's values, before it assembles them; a batch larger than the
// whole share is read when none is waiting for the consumer. The consumer
// gives the room back as it takes each batch.

// aheadBudget bounds the bytes of the batches a stream (and the streams
// opened after it, which share it) has read ahead and not handed over.
type aheadBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	peak    int64
	next    uint64          // the last turn handed out
	turn    uint64          // the turn being admitted
	passed  map[uint64]bool // turns after turn that admit nothing
	changed chan struct{}   // closed and replaced whenever used falls or turn moves
}

func newAheadBudget(limit int64) *aheadBudget {
	return &aheadBudget{limit: limit, turn: 1, passed: map[uint64]bool{}, changed: make(chan struct{})}
}

// take returns the turn of the next read, in the order reads start.
func (a *aheadBudget) take() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	return a.next
}

// admit waits until it is turn t's and n bytes fit, or nothing is held, and
// holds them.
func (a *aheadBudget) admit(ctx context.Context, t uint64, n int64) error {
	for {
		a.mu.Lock()
		if a.turn == t && (a.used+n <= a.limit || a.used == 0) {
			a.used += n
			a.peak = max(a.peak, a.used)
			a.passLocked(t)
			a.mu.Unlock()
			return nil
		}
		changed := a.changed
		a.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read ahead", "")
		}
	}
}

// pass gives up turn t without holding anything: a read that failed.
func (a *aheadBudget) pass(t uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.passLocked(t)
}

func (a *aheadBudget) passLocked(t uint64) {
	if t < a.turn {
		return
	}
	a.passed[t] = true
	for a.passed[a.turn] {
		delete(a.passed, a.turn)
		a.turn++
	}
	a.signalLocked()
}

// release gives back n bytes: a batch handed over, or dropped.
func (a *aheadBudget) release(n int64) {
	if n == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used -= n
	a.signalLocked()
}

// Used returns the bytes held now, and the most held at any time.
func (a *aheadBudget) Used() (now, peak int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used, a.peak
}

func (a *aheadBudget) signalLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}
