package table

import (
	"cmp"
	"context"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Decoding a row group column by column through an io.ReaderAt makes one
// request per column chunk, each waiting its turn. On an object store each
// request costs a round trip, so the reader instead works out from the footer
// which bytes the projected columns of a row group occupy, merges chunks
// separated by small holes into ranges (reading a hole is cheaper than
// another request), splits long ranges into parts fetched in parallel, and
// fetches them all at once before decoding from memory. Reads are bounded
// per reader (ReaderOptions.MaxReads); decoding is bounded separately by the
// number of cores, so that waiting on the store never holds a core.

const (
	// holeBytes is the largest gap between two sections (column chunks,
	// pages) of local files that is read rather than skipped (Arrow C++'s
	// default hole size limit).
	holeBytes = 8 << 10
	// On a remote store a hole is read where that costs less than the round
	// trip of another request: a hole of up to the store's first-byte
	// latency (as its reads have shown it, Location.ReadLatency) times
	// holeRate, at least remoteHoleBytes (holeBytes with a disk cache, whose
	// hits are reads of local files) and at most maxHoleBytes. holeRate
	// is what a hole's bytes cost against a request, measured: a full
	// shuffle of a table 4 times its budget on the S3 test server ran
	// fastest with holes of 64 KiB at 0 ms (59 k rows/s against 36 k with
	// 256 KiB, the bytes costing CPU on both sides) and of 256 KiB at 50 ms
	// (10-11 k against 6.7-7.1 k with 64 KiB, the requests costing round
	// trips).
	remoteHoleBytes = 64 << 10
	maxHoleBytes    = 1 << 20
	holeRate        = 5 << 20 // bytes a second
	// A hole's bytes also take a part of the fetch share while they wait
	// to be decoded past, which requests of other row groups wait for: a
	// hole is at most a holeShare-th of a decoder's part of the share. A
	// full shuffle of a table 32 times its budget on the S3 test server at
	// +50 ms (a decoder's part of the share 2 MB, the pages 16 KiB and a few
	// of each row group's needed) ran at 1.3 k rows/s with holes of 64 KiB
	// against 0.9 k with 256 KiB, fetching 20 against 52 times the bytes it
	// delivered; at 4 times the budget (a part of 16 MB) 256 KiB stayed
	// best (42 k rows/s against 29 k with 64 KiB).
	holeShare = 32
	// partBytes is the largest single range request; longer ranges are split
	// into parts fetched in parallel.
	partBytes = 8 << 20
	// DefaultMaxReads is the default number of range requests a reader of
	// local files keeps in flight.
	DefaultMaxReads = 16
	// RemoteMaxReads is DefaultMaxReads on a remote store: a request there
	// waits tens of milliseconds for its first byte, and only requests in
	// flight together hide it. The bytes they fetch stay bounded by the
	// reader's FetchBytes.
	RemoteMaxReads = 64
	// answeredPerRead is how many requests, per one of MaxReads, may wait
	// for their first byte before they hold bytes (fetchOnAnswer): they
	// hold no memory, and a full shuffle of a table 4 times its budget on
	// the S3 test server at +50 ms ran at 25–30 k rows/s with 64 of them
	// and 40 k with 128 (as with 192, 256).
	answeredPerRead = 2
)

// byteRange is n bytes of an object starting at off.
type byteRange struct{ off, n int64 }

// leafChunks returns the byte range of each of the given leaf columns of row
// group g.
func leafChunks(md *metadata.FileMetaData, g int, leaves []int) ([]byteRange, error) {
	rg := md.RowGroup(g)
	var chunks []byteRange
	for _, leaf := range leaves {
		col, err := rg.ColumnChunk(leaf)
		if err != nil {
			return nil, err
		}
		start := col.DataPageOffset()
		if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && col.DictionaryPageOffset() < start {
			start = col.DictionaryPageOffset()
		}
		chunks = append(chunks, byteRange{start, col.TotalCompressedSize()})
	}
	return chunks, nil
}

// holeFor is the largest gap between two sections of loc that a read
// reads rather than skips.
func holeFor(loc *store.Location) int64 {
	if !loc.Remote() {
		return holeBytes
	}
	least := int64(remoteHoleBytes)
	if loc.Cache != nil {
		least = holeBytes
	}
	lat, ok := loc.ReadLatency()
	if !ok {
		return least
	}
	return min(max(int64(lat.Seconds()*holeRate), least), maxHoleBytes)
}

// mergeRanges sorts ranges, merges those separated by holes of at most hole
// bytes, and splits the result into parts of at most partBytes.
func mergeRanges(chunks []byteRange, hole int64) []byteRange {
	slices.SortFunc(chunks, func(a, b byteRange) int { return int(a.off - b.off) })
	var merged []byteRange
	for _, c := range chunks {
		if k := len(merged) - 1; k >= 0 && c.off <= merged[k].off+merged[k].n+hole {
			merged[k].n = max(merged[k].n, c.off+c.n-merged[k].off)
			continue
		}
		merged = append(merged, c)
	}
	var parts []byteRange
	for _, m := range merged {
		for off := m.off; off < m.off+m.n; off += partBytes {
			parts = append(parts, byteRange{off, min(partBytes, m.off+m.n-off)})
		}
	}
	return parts
}

// fetched serves reads of one object from ranges fetched ahead, and passes
// any other read to the store.
type fetched struct {
	*store.ReaderAt
	ranges []byteRange
	data   [][]byte
	stats  *readerStats // counts data's bytes held
	// ahead, when not nil, serves the reads of a row group larger than a
	// decoder's part of the reader's fetch share, which is streamed, not
	// fetched: its sections are fetched in windows ahead of the reads
	// (prefetch.go).
	ahead *prefetch
	// crcs check the page CRCs of the sections streamed as they are read;
	// sorted by offset (sections do not overlap).
	crcs []*pageCRCs
}

// minWindow is the least a stream over a section not fetched reads at a
// time.
const minWindow = 64 << 10

// streamBufferSize is the buffer of the streams over sections of src
// (readerStream, and arrow-go's for the columns pqarrow decodes): a window
// of a src that streams them, else arrow-go's default (sections fetched are
// read from memory).
func streamBufferSize(src io.ReaderAt) int64 {
	if f, ok := src.(*fetched); ok && f.ahead != nil {
		return f.ahead.window()
	}
	return parquet.DefaultBufSize
}

// ReadAt copies from the fetched ranges holding [off, off+len(p)) (parts of
// one range lie end to end), else reads from the store.
func (f *fetched) ReadAt(p []byte, off int64) (int, error) {
	for i, r := range f.ranges {
		if off < r.off || off >= r.off+r.n {
			continue
		}
		n := copy(p, f.data[i][off-r.off:])
		for j := i + 1; n < len(p) && j < len(f.ranges) && f.ranges[j].off == off+int64(n); j++ {
			n += copy(p[n:], f.data[j])
		}
		if n == len(p) {
			return n, nil
		}
		break
	}
	n, err := f.readAhead(p, off)
	// Only the sections the bytes read overlap: a row group streamed in
	// small pages has hundreds, and a read is often a page.
	i, _ := slices.BinarySearchFunc(f.crcs, off, func(c *pageCRCs, off int64) int { return cmp.Compare(c.s.off+c.s.n, off+1) })
	for _, c := range f.crcs[i:] {
		if c.s.off >= off+int64(n) {
			break
		}
		if err := c.read(f.ReaderAt, p[:n], off); err != nil {
			return 0, err // no bytes of a page whose CRC does not match
		}
	}
	return n, err
}

// readAhead reads [off, off+len(p)) from the windows fetched ahead where
// they hold it, the rest from the store.
func (f *fetched) readAhead(p []byte, off int64) (int, error) {
	n := 0
	if f.ahead != nil {
		var err error
		if n, err = f.ahead.read(p, off); err != nil || n == len(p) {
			return n, err
		}
	}
	m, err := f.ReaderAt.ReadAt(p[n:], off+int64(n))
	return n + m, err
}

// fetchedBytes returns the bytes of r where src has fetched them, within
// one fetched range, to be read in place; nil where it has not.
func fetchedBytes(src io.ReaderAt, r byteRange) []byte {
	f, ok := src.(*fetched)
	if !ok {
		return nil
	}
	for i, fr := range f.ranges {
		if r.off >= fr.off && r.off+r.n <= fr.off+fr.n && f.data[i] != nil {
			return f.data[i][r.off-fr.off : r.off-fr.off+r.n]
		}
	}
	return nil
}

// fetch reads ranges of obj in parallel, as slots, shared by the reader's
// fetches, grant requests: the row group of priority prio (the lowest is
// needed soonest) before those needed later.
func fetch(ctx context.Context, ra *store.ReaderAt, ranges []byteRange, slots *slots, prio int64, stats *readerStats, where string) (*fetched, error) {
	start := time.Now()
	defer func() { stats.fetchNanos.Add(int64(time.Since(start))) }()
	f := &fetched{ReaderAt: ra, ranges: ranges, data: make([][]byte, len(ranges)), stats: stats}
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range ranges {
		if _, err := slots.acquire(gctx, prio, 0); err != nil {
			g.Wait()
			f.release()
			return nil, errcode.Wrap(context.Cause(gctx), errcode.Canceled, "read", where)
		}
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read", where)
			defer slots.release(0)
			return f.fill(i, func(buf []byte) (int, error) { return ra.ReadAt(buf, r.off) })
		})
	}
	if err := g.Wait(); err != nil {
		f.release()
		return nil, err
	}
	return f, nil
}

// fetchOnAnswer fetches ranges of an object of a remote store as fetch
// does, but takes the n bytes they hold of the reader's fetch share only
// once the store has begun to answer every one of them. A distant store's
// first byte comes tens of milliseconds after the request, and bytes taken
// before it wait that long unused: taken with the request, the share bound
// a full shuffle at +50 ms to a round trip and a transfer for each share's
// worth of bytes (15–16 k rows/s, against 134 k from local files). The
// group's requests take their slots all at once, from a pool of their own
// (Reader.answered), so that groups waiting for bytes never hold slots that
// one holding bytes waits for; ranges holds at most that pool's slots. It
// returns f and the bytes taken, to release after f.
func (r *Reader) fetchOnAnswer(ctx context.Context, ra *store.ReaderAt, ranges []byteRange, n, prio int64, where string) (f *fetched, held int64, err error) {
	start := time.Now()
	defer func() { r.stats.fetchNanos.Add(int64(time.Since(start))) }()
	if _, err := r.answered.acquireSlots(ctx, prio, len(ranges), 0); err != nil {
		return nil, 0, errcode.Wrap(err, errcode.Canceled, "read", where)
	}
	answers := make([]*store.Answer, len(ranges))
	fail := func(err error) (*fetched, int64, error) {
		for _, a := range answers {
			if a != nil {
				a.Close()
			}
			r.answered.release(0)
		}
		return nil, 0, err
	}
	var sent errgroup.Group
	for i, rg := range ranges {
		sent.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read", where)
			answers[i] = ra.Request(rg.off, rg.n)
			return nil
		})
	}
	if err := sent.Wait(); err != nil {
		return fail(err)
	}
	if held, err = r.fetching.acquire(ctx, prio, n); err != nil {
		return fail(errcode.Wrap(err, errcode.Canceled, "read", where))
	}
	f = &fetched{ReaderAt: ra, ranges: ranges, data: make([][]byte, len(ranges)), stats: &r.stats}
	var read errgroup.Group
	for i := range ranges {
		read.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read", where)
			defer r.answered.release(0)
			return f.fill(i, answers[i].ReadInto)
		})
	}
	if err := read.Wait(); err != nil {
		f.release()
		r.fetching.release(held)
		return nil, 0, err
	}
	return f, held, nil
}

// fill reads f's range i with read into a buffer of its own, counted as
// held until f is released (whether read fails or not).
func (f *fetched) fill(i int, read func([]byte) (int, error)) error {
	buf := scratch{}.Allocate(int(f.ranges[i].n))
	f.stats.holdFetched(f.ranges[i].n)
	f.data[i] = buf
	_, err := read(buf)
	return err
}

// release recycles f's buffers; f serves no read after it.
func (f *fetched) release() {
	for _, b := range f.data {
		if b != nil {
			f.stats.holdFetched(-int64(len(b)))
			scratch{}.Free(b)
		}
	}
	if f.ahead != nil {
		f.ahead.close()
	}
	f.data, f.ranges, f.ahead = nil, nil, nil
}

// ReaderStats count a reader's work since it was made.
type ReaderStats struct {
	BytesRead    int64         `json:"bytes_read"`    // bytes received from the store
	Requests     int64         `json:"requests"`      // range requests made to the store
	RowGroups    int64         `json:"row_groups"`    // row groups fetched and decoded
	FetchTime    time.Duration `json:"fetch_ns"`      // summed over requests running in parallel
	DecodeTime   time.Duration `json:"decode_ns"`     // summed over row groups decoded in parallel
	DecodedBytes int64         `json:"decoded_bytes"` // bytes of the pages decoded (of the columns, for those pqarrow decodes)
	KeptRows     int64         `json:"kept_rows"`     // rows copied out of decoded row groups to be read
	KeptBytes    int64         `json:"kept_bytes"`    // their bytes
	Hedged       int64         `json:"hedged"`        // range requests sent again because the first answer was late
	FetchedBytes int64         `json:"fetched_bytes"` // bytes fetched and not yet decoded, now
	FetchedPeak  int64         `json:"fetched_peak"`  // the most of them held at any time
	// What the disk cache (OpenOptions.BlockCache) served instead of the
	// store: blocks, and the bytes of reads they held; and the blocks
	// fetched that it could not keep (its disk full or unwritable).
	CacheHits     int64 `json:"cache_hits"`
	CacheHitBytes int64 `json:"cache_hit_bytes"`
	CacheUnstored int64 `json:"cache_unstored"`
	// The bytes of the largest row dealt, as a batch's bytes count it
	// (NoteRow).
	LargestRow int64 `json:"largest_row"`
	// The largest data page and the largest dictionary page charged whole
	// to the rows kept (see pieceBytes), decoded: pages of rows far larger
	// than their neighbours; 0 while none was.
	LargePage       int64 `json:"large_page"`
	LargeDictionary int64 `json:"large_dictionary"`
}

// readerStats is the live, atomic form of ReaderStats.
type readerStats struct {
	reads                                                         store.ReadCounts // of the data files' ReaderAts
	groups, fetchNanos, decodeNanos, decoded, keptRows, keptBytes atomic.Int64
	fetched, fetchedPeak                                          atomic.Int64 // bytes fetched and not yet decoded: now, and the most
	largestRow, largePage, largeDict                              atomic.Int64 // ReaderStats.LargestRow, LargePage, LargeDictionary
}

// NoteRow records a row dealt of bytes bytes (ReaderStats.LargestRow).
func (r *Reader) NoteRow(bytes int64) { atomicMax(&r.stats.largestRow, bytes) }

// noteLarge records a page charged whole (see ReaderStats.LargePage).
func (st *readerStats) noteLarge(lp largePage) {
	most := &st.largePage
	if lp.dict {
		most = &st.largeDict
	}
	atomicMax(most, lp.bytes)
}

// atomicMax raises a to n if n is larger.
func atomicMax(a *atomic.Int64, n int64) {
	for old := a.Load(); n > old && !a.CompareAndSwap(old, n); old = a.Load() {
	}
}

// holdFetched counts n more bytes fetched and held until decoded (fewer,
// negative).
func (st *readerStats) holdFetched(n int64) {
	now := st.fetched.Add(n)
	for peak := st.fetchedPeak.Load(); now > peak && !st.fetchedPeak.CompareAndSwap(peak, now); peak = st.fetchedPeak.Load() {
	}
}
