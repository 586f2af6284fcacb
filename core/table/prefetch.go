package table

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// A row group whose sections do not fit a decoder's part of the fetch share
// is read as it is decoded. Read a window at a time, on demand, each window
// waits a round trip before the decoder can go on: 50 ms from the store, a
// row group of 8 MB read in windows of 1 MB took half a second, two decoders
// kept two requests in flight of the 64 a reader may have, and a full shuffle
// of a table 32 times its budget crawled at 57 rows/s. A prefetch instead
// cuts the sections to read into windows and fetches them in the order the
// decoder will read them (the order of their offsets: columns are decoded
// one after the other, pages in order), as many at once as its bytes allow,
// each taking one of the reader's request slots; the decoder reads each
// window once it has come, and a window is freed once a read lies past it.
// From a remote store, not through the disk cache, the requests of the
// windows after those are sent ahead of their bytes (prefetchAhead of them,
// Request), as fetchOnAnswer sends a row group's: the wait for a first byte
// holds no memory, and a window whose bytes have room reads an answer
// already begun.

// prefetchWindows is how many windows a prefetch cuts its bytes into, so
// that as many requests can be in flight for one streamed row group.
const prefetchWindows = 8

// prefetchAhead is how many windows past those started a prefetch from a
// remote store has sent requests for, each window's request sent without
// its bytes and without a request slot: at most that many more requests in
// flight for each row group streamed (at most Decoders of them at once).
const prefetchAhead = 2 * prefetchWindows

// prefetch fetches windows of one object ahead of the reads that need them.
// Its read is called by one goroutine at a time (a row group's decoder).
type prefetch struct {
	ctx    context.Context // of the fetches and of reads' waits; ends with close
	where  string          // the object, for errors
	ra     *store.ReaderAt
	stats  *readerStats // counts the windows' bytes held
	cancel context.CancelFunc
	wins   []byteRange // in ascending offsets, not overlapping
	wg     sync.WaitGroup

	mu      sync.Mutex
	data    [][]byte        // of each window once fetched; nil again once freed
	done    []chan struct{} // closed once the window's fetch has ended
	errs    []error
	freed   []bool        // windows a read has gone past
	started []bool        // windows whose bytes count in held until freed
	ended   []bool        // windows whose done is closed
	held    int64         // bytes of windows started and not freed
	first   int           // the windows before it are freed
	need    int           // the last window a read waits for, fetched whatever the bytes held
	changed chan struct{} // closed and replaced when held falls, need moves or next moves

	// Requests sent ahead of their bytes (nil: none are): the answer of
	// window i once sent[i] is closed, nil once read or let go or when
	// none was sent; next is the first window feed has not started or
	// skipped.
	answers []*store.Answer
	sent    []chan struct{}
	next    int
}

// prefetchWindow is the window of a prefetch within part bytes: an eighth
// of them (prefetchWindows), at least minWindow. Within a part of less than
// two windows, only the windows reads wait for are fetched, one at a time.
func prefetchWindow(part int64) int64 {
	return max(part/prefetchWindows, minWindow)
}

// newPrefetch starts fetching ranges (in ascending offsets, not overlapping)
// of object where, read by the ReaderAt open returns for the prefetch's
// context (which close ends): in windows of win bytes, at most limit bytes
// of them held at once (the windows a read waits for are fetched whatever
// the limit), each request granted a slot of reads at priority prio.
func newPrefetch(ctx context.Context, open func(context.Context) *store.ReaderAt, where string, ranges []byteRange, win, limit int64, reads *slots, prio int64, stats *readerStats) *prefetch {
	p := &prefetch{where: where, stats: stats, changed: make(chan struct{})}
	for _, r := range ranges {
		for off := r.off; off < r.off+r.n; off += win {
			p.wins = append(p.wins, byteRange{off, min(win, r.off+r.n-off)})
		}
	}
	p.data = make([][]byte, len(p.wins))
	p.errs = make([]error, len(p.wins))
	p.freed = make([]bool, len(p.wins))
	p.started = make([]bool, len(p.wins))
	p.ended = make([]bool, len(p.wins))
	p.done = make([]chan struct{}, len(p.wins))
	for i := range p.done {
		p.done[i] = make(chan struct{})
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.ra = open(p.ctx)
	if p.ra.Direct() {
		p.answers = make([]*store.Answer, len(p.wins))
		p.sent = make([]chan struct{}, len(p.wins))
		for i := range p.sent {
			p.sent[i] = make(chan struct{})
		}
		p.wg.Add(1)
		go func() (err error) {
			defer p.wg.Done()
			defer recoverTo(&err, "read", p.where)
			return p.send(p.ctx)
		}()
	}
	p.wg.Add(1)
	go func() (err error) {
		defer p.wg.Done()
		defer func() {
			for j := range p.wins { // those not ended yet end with err
				if err != nil {
					p.end(j, nil, err)
				}
			}
		}()
		defer recoverTo(&err, "read", p.where)
		return p.feed(p.ctx, limit, reads, prio)
	}()
	return p
}

// window is the size of the windows, for the stream's buffer.
func (p *prefetch) window() int64 {
	if len(p.wins) == 0 {
		return minWindow
	}
	return p.wins[0].n
}

// send sends the windows' requests in order, each once fewer than
// prefetchAhead windows before it are still to be started by feed; a
// window freed before it is sent is not. It returns why it stopped early.
func (p *prefetch) send(ctx context.Context) error {
	for i, w := range p.wins {
		for {
			p.mu.Lock()
			skip, due, changed := p.freed[i], i < p.next+prefetchAhead, p.changed
			p.mu.Unlock()
			if skip {
				close(p.sent[i])
				break
			}
			if due {
				p.wg.Add(1)
				go func() (err error) {
					defer p.wg.Done()
					defer close(p.sent[i])
					defer recoverTo(&err, "read", p.where)
					a := p.ra.Request(w.off, w.n)
					p.mu.Lock()
					defer p.mu.Unlock()
					if p.freed[i] && !p.started[i] { // skipped meanwhile: no one reads it
						a.Close()
						return nil
					}
					p.answers[i] = a
					return nil
				}()
				break
			}
			if err := await(ctx, changed); err != nil {
				return err
			}
		}
	}
	return nil
}

// await waits for changed to be closed, or for ctx to end (it returns why).
func await(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// answer waits for the request of window i sent ahead, and takes its
// answer: nil where none was sent or none is kept (ReadAt reads it then).
func (p *prefetch) answer(i int) *store.Answer {
	if p.sent == nil {
		return nil
	}
	select {
	case <-p.sent[i]:
	case <-p.ctx.Done():
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.answers[i]
	p.answers[i] = nil
	return a
}

// dropAnswerLocked lets go of the answer of window i, if one is kept: no
// read will take it.
func (p *prefetch) dropAnswerLocked(i int) {
	if p.answers != nil && p.answers[i] != nil {
		p.answers[i].Close()
		p.answers[i] = nil
	}
}

// feed starts the windows' fetches in order, each once the bytes held leave
// room for it or once a read waits for it. It returns why it stopped early.
func (p *prefetch) feed(ctx context.Context, limit int64, reads *slots, prio int64) error {
	for i, w := range p.wins {
		for {
			p.mu.Lock()
			skip, fits := p.freed[i], p.held+w.n <= limit || i <= p.need
			changed := p.changed
			if fits && !skip {
				p.held += w.n
				p.started[i] = true
			}
			if fits || skip {
				p.next = i + 1
				p.signalLocked()
				if skip {
					p.dropAnswerLocked(i)
				}
			}
			p.mu.Unlock()
			if skip {
				p.end(i, nil, nil) // a read went past it before it was fetched
				break
			}
			if fits {
				if _, err := reads.acquire(ctx, prio, 0); err != nil {
					return err
				}
				p.wg.Add(1)
				go func() (buf []byte, err error) {
					defer p.wg.Done()
					defer reads.release(0)
					defer func() { p.end(i, buf, err) }()
					defer recoverTo(&err, "read", p.where)
					a := p.answer(i)
					buf = scratch{}.Allocate(int(w.n))
					p.stats.holdFetched(w.n)
					if a != nil {
						_, err = a.ReadInto(buf)
					} else {
						_, err = p.ra.ReadAt(buf, w.off)
					}
					return buf, err
				}()
				break
			}
			if err := await(ctx, changed); err != nil {
				return err
			}
		}
	}
	return nil
}

// end records the outcome of window i, once: its bytes, or err. A window
// freed while it was fetched, or whose fetch failed, gives its bytes back
// at once.
func (p *prefetch) end(i int, buf []byte, err error) {
	p.mu.Lock()
	if p.ended[i] {
		p.mu.Unlock()
		p.free(buf)
		return
	}
	p.ended[i] = true
	if p.freed[i] || err != nil {
		p.free(buf)
		buf = nil
		if p.started[i] {
			p.held -= p.wins[i].n
			p.signalLocked()
		}
	}
	p.data[i], p.errs[i] = buf, err
	p.mu.Unlock()
	close(p.done[i])
}

func (p *prefetch) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// read copies [off, off+len(p)) into b from the windows that hold it, waiting
// for their fetches, and frees the windows before the first. It returns how
// many bytes it copied: fewer than len(b) where the bytes lie outside the
// windows, or in windows already freed, for the caller to read otherwise.
func (p *prefetch) read(b []byte, off int64) (int, error) {
	i, _ := slices.BinarySearchFunc(p.wins, off, func(w byteRange, off int64) int { return cmp.Compare(w.off+w.n, off+1) })
	if i == len(p.wins) || p.wins[i].off > off {
		return 0, nil
	}
	p.mu.Lock()
	if i < p.first {
		p.mu.Unlock()
		return 0, nil
	}
	for j := p.first; j < i; j++ {
		p.freeLocked(j)
	}
	p.first = max(p.first, i)
	p.mu.Unlock()
	n := 0
	for j := i; n < len(b) && j < len(p.wins) && p.wins[j].off <= off+int64(n); j++ {
		p.mu.Lock()
		if j > p.need {
			p.need = j
			p.signalLocked()
		}
		p.mu.Unlock()
		select {
		case <-p.done[j]:
		case <-p.ctx.Done():
			return n, errcode.Wrap(context.Cause(p.ctx), errcode.Canceled, "read", "")
		}
		p.mu.Lock()
		data, err := p.data[j], p.errs[j]
		p.mu.Unlock()
		if err != nil {
			return n, err
		}
		n += copy(b[n:], data[off+int64(n)-p.wins[j].off:])
		if p.wins[j].off+p.wins[j].n <= off+int64(n) {
			// Read to its end: reads come in order, so it is freed now,
			// not once a later read lies past it, and the next windows
			// are fetched in its room while the decoder works on what it
			// copied (a page of a megabyte spans several windows, and
			// held them until the page after it was read).
			p.mu.Lock()
			p.freeLocked(j)
			p.first = max(p.first, j+1)
			p.signalLocked()
			p.mu.Unlock()
		}
	}
	return n, nil
}

// freeLocked frees window j: its bytes now if fetched, else once its fetch
// ends (or it is never started).
func (p *prefetch) freeLocked(j int) {
	if p.freed[j] {
		return
	}
	p.freed[j] = true
	if p.data[j] != nil {
		p.free(p.data[j])
		p.data[j] = nil
		p.held -= p.wins[j].n
	}
}

// free recycles the buffer of a window, if any.
func (p *prefetch) free(buf []byte) {
	if buf != nil {
		p.stats.holdFetched(-int64(len(buf)))
		scratch{}.Free(buf)
	}
}

// close stops the fetches still to come, waits for those in flight and frees
// every window.
func (p *prefetch) close() {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for j := range p.wins {
		p.freeLocked(j)
		p.dropAnswerLocked(j)
	}
}
