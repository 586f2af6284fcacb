package table

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/singleflight"

	"github.com/croupier-data/croupier/core/errcode"
)

// Page-level reads.
//
// A Parquet page is the smallest unit a reader can decode. When a file has an
// offset index (croupier's own files always do), it says where each data page
// of a column chunk lies and which row it starts with: pages of a column
// begin at row boundaries. Keep then fetches and decodes, of each column
// croupier's page decoder handles, only the dictionary page and the data
// pages that hold rows it keeps, so that a horizon that needs a few rows of a
// row group pays for a few pages, not the whole chunk. Files without an
// offset index (pyarrow writes none by default) are learnt as they are read:
// a read of some rows of such a chunk decodes its pages from the first not
// located yet up to the page that ends the last row it keeps, and stops
// there; where its pages start at rows, those it passed are recorded
// (learnPages), so that a later read takes only its pages among them and
// goes on from where the last read stopped. A header does not say how many
// rows a V1 page of lists holds, so a page's rows are learnt by decoding its
// levels, not by reading headers alone. The locations live as long as the
// Table; rewriting a dataset as a croupier table gives its files an index.

// pageLocs are the data pages of one column chunk: the first row of each in
// its row group, and where each lies in the file. first[len(off)] is the row
// group's row count, or, where the pages are known only up to a row (learnt
// by the reads so far of a chunk without an offset index), that row: the
// pages from it on then lie in rest.
type pageLocs struct {
	first     []int64
	off, size []int64
	rest      byteRange // the pages not located yet, to the chunk's end; empty when every page is
	entries   int64     // level entries of the pages located, where learnt with rest
}

// unlocated returns the locations of a chunk spanning chunk of which no
// page is located yet.
func unlocated(chunk byteRange) *pageLocs { return &pageLocs{first: []int64{0}, rest: chunk} }

// add appends a page of rows rows at [off, off+size) after those located.
func (l *pageLocs) add(rows, off, size int64) {
	l.first = append(l.first, l.known()+rows)
	l.off, l.size = append(l.off, off), append(l.size, size)
}

// partial reports whether some of the chunk's pages are not located yet.
func (l *pageLocs) partial() bool { return l.rest.n > 0 }

// known returns the row that the pages not located yet start with, or the
// row group's row count.
func (l *pageLocs) known() int64 { return l.first[len(l.off)] }

// pageKey names one column chunk.
type pageKey struct{ file, group, leaf int }

// pageIndex caches the offset indexes a table has read, by column chunk, and
// for a chunk without one the locations learnt of its pages (nil until a
// read or the Cache has located some).
type pageIndex struct {
	m      sync.Map // pageKey -> *pageLocs
	loads  singleflight.Group
	tails  indexTails
	learnt learntPages
}

// learntPages holds the page locations learnt of chunks without an offset
// index, to be written to the table's Cache. One goroutine at a time writes
// all that is waiting, in one transaction, and goes on while more arrived
// meanwhile: a decoder never waits for the catalog's lock.
type learntPages struct {
	mu      sync.Mutex
	keys    []string
	values  [][]byte
	writing sync.WaitGroup // the writer, while one runs
	running bool
}

// pagesKey is the Cache key of the page locations of column chunk key.
func (t *Table) pagesKey(key pageKey) string {
	o := t.pin.Files[key.file].Object
	return cacheKey("pages", t.loc.ObjectURI(o.Key), o) +
		"\x00" + strconv.Itoa(key.group) + "\x00" + strconv.Itoa(key.leaf)
}

// remember queues the locations of every page of chunk key for the Cache.
func (t *Table) remember(key pageKey, locs *pageLocs) {
	if t.cat == nil {
		return
	}
	lp := &t.pageIndex.learnt
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.keys, lp.values = append(lp.keys, t.pagesKey(key)), append(lp.values, locs.encode())
	if !lp.running {
		lp.running = true
		lp.writing.Add(1)
		go t.writeLearnt()
	}
}

// writeLearnt writes what remember queued until nothing waits. Its error,
// a panic's, is dropped: the cache is best effort.
func (t *Table) writeLearnt() (err error) {
	defer t.pageIndex.learnt.writing.Done()
	defer recoverTo(&err, "cache page locations", t.loc.URI)
	lp := &t.pageIndex.learnt
	for {
		lp.mu.Lock()
		keys, values := lp.keys, lp.values
		lp.keys, lp.values = nil, nil
		if len(keys) == 0 {
			lp.running = false
			lp.mu.Unlock()
			return nil
		}
		lp.mu.Unlock()
		t.cat.Put(keys, values)
	}
}

// encode returns the locations of a chunk located to its end, as the Cache
// keeps them: a CRC-32 of what follows, the count of pages, then each
// page's rows, its distance from the end of the page before it (from 0 for
// the first) and its size, as varints.
func (l *pageLocs) encode() []byte {
	b := binary.AppendUvarint(make([]byte, 4, 4+3*4*len(l.off)), uint64(len(l.off)))
	var end int64
	for i, off := range l.off {
		b = binary.AppendUvarint(b, uint64(l.first[i+1]-l.first[i]))
		b = binary.AppendUvarint(b, uint64(off-end))
		b = binary.AppendUvarint(b, uint64(l.size[i]))
		end = off + l.size[i]
	}
	binary.LittleEndian.PutUint32(b, crc32.ChecksumIEEE(b[4:]))
	return b
}

// decodePageLocs parses what encode wrote, for a chunk spanning chunk in a
// row group of rows rows; an entry that does not add up is an error (the
// Cache then misses).
func decodePageLocs(b []byte, rows int64, chunk byteRange) (*pageLocs, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != crc32.ChecksumIEEE(b[4:]) {
		return nil, errors.New("page locations: checksum mismatch")
	}
	b = b[4:]
	next := func() int64 {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > math.MaxInt64/2 {
			b = nil
			return -1
		}
		b = b[n:]
		return int64(v)
	}
	n := next()
	if n <= 0 || n > int64(len(b)) {
		return nil, errors.New("page locations: bad page count")
	}
	locs := &pageLocs{first: make([]int64, 1, n+1), off: make([]int64, 0, n), size: make([]int64, 0, n)}
	var end int64
	for range n {
		r, gap, size := next(), next(), next()
		if r <= 0 || gap < 0 || size <= 0 {
			return nil, errors.New("page locations: bad page")
		}
		locs.add(r, end+gap, size)
		end += gap + size
	}
	if len(b) != 0 || locs.known() != rows || locs.off[0] < chunk.off || end > chunk.off+chunk.n {
		return nil, errors.New("page locations do not fit the chunk")
	}
	return locs, nil
}

// indexTails holds the offset indexes of the files whose footers the table
// read last, where the footer's read fetched them too (the bytes before a
// footer usually hold them): a file's first page-level read then costs no
// request of its own, where it would cost a round trip more before its first
// data page. At most tailsBytes are held, the oldest dropped first.
type indexTails struct {
	mu    sync.Mutex
	m     map[int]tailBytes // file -> its offset indexes, from the first's offset on
	order []int
	bytes int
}

// tailsBytes bounds what indexTails hold.
const tailsBytes = 1 << 20

// keep holds the offset indexes of file f, whose footer is md, when tail
// holds them all.
func (it *indexTails) keep(f int, md *metadata.FileMetaData, tail tailBytes) {
	if tail.b == nil {
		return
	}
	start, end := int64(-1), int64(-1)
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for leaf := range rg.NumColumns() {
			col, err := rg.ColumnChunk(leaf)
			if err != nil {
				return
			}
			if loc := col.GetOffsetIndexLocation(); loc != nil && loc.Length > 0 {
				if start < 0 || loc.Offset < start {
					start = loc.Offset
				}
				end = max(end, loc.Offset+int64(loc.Length))
			}
		}
	}
	if start < tail.off || end > tail.off+int64(len(tail.b)) || end-start > tailsBytes {
		return
	}
	held := tailBytes{start, bytes.Clone(tail.b[start-tail.off : end-tail.off])}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.m == nil {
		it.m = map[int]tailBytes{}
	}
	if _, ok := it.m[f]; ok {
		return
	}
	it.m[f] = held
	it.order = append(it.order, f)
	for it.bytes += len(held.b); it.bytes > tailsBytes; it.order = it.order[1:] {
		it.bytes -= len(it.m[it.order[0]].b)
		delete(it.m, it.order[0])
	}
}

// read copies into buf file f's bytes from off on, if held, and reports
// whether it did.
func (it *indexTails) read(f int, buf []byte, off int64) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	held, ok := it.m[f]
	if !ok || off < held.off || off+int64(len(buf)) > held.off+int64(len(held.b)) {
		return false
	}
	copy(buf, held.b[off-held.off:])
	return true
}

// hasOffsetIndex reports whether the footer gives chunk an offset index.
func hasOffsetIndex(chunk *metadata.ColumnChunkMetaData) bool {
	loc := chunk.GetOffsetIndexLocation()
	return loc != nil && loc.Length > 0
}

// pageIndexSpan bounds one read of offset indexes. A writer puts those of a
// file together, after its row groups: far fewer bytes.
const pageIndexSpan = 8 << 20

// pages returns the page locations of the given leaf columns of row group g
// of file f, nil for a column without an offset index. The first use of a
// file reads its offset indexes for those columns, in every row group, in
// one request where they lie together.
func (t *Table) pages(ctx context.Context, f, g int, leaves []int) ([]*pageLocs, error) {
	out := make([]*pageLocs, len(leaves))
	for {
		missing := false
		for i, leaf := range leaves {
			v, ok := t.pageIndex.m.Load(pageKey{f, g, leaf})
			if !ok {
				missing = true
				break
			}
			out[i] = v.(*pageLocs)
		}
		if !missing {
			return out, nil
		}
		_, err, _ := t.pageIndex.loads.Do(fmt.Sprint(f, leaves), func() (any, error) {
			return nil, t.loadPages(ctx, f, leaves)
		})
		// A load canceled by the caller that started it is retried by the
		// others.
		if err != nil && (errcode.Of(err) != errcode.Canceled || ctx.Err() != nil) {
			return nil, err
		}
	}
}

// loadPages reads the offset indexes of the given leaf columns of every row
// group of file f.
func (t *Table) loadPages(ctx context.Context, f int, leaves []int) error {
	md, err := t.Footer(ctx, f)
	if err != nil {
		return err
	}
	where := t.loc.ObjectURI(t.pin.Files[f].Key)
	type want struct {
		key       pageKey
		off, size int64
	}
	var (
		wants     []want
		unindexed []pageKey
	)
	for g := range md.NumRowGroups() {
		for _, leaf := range leaves {
			col, err := md.RowGroup(g).ColumnChunk(leaf)
			if err != nil {
				return errcode.Wrap(err, errcode.Corrupt, "read page index", where)
			}
			loc := col.GetOffsetIndexLocation()
			if loc == nil || loc.Length <= 0 {
				unindexed = append(unindexed, pageKey{f, g, leaf})
				continue
			}
			if loc.Offset < 0 || loc.Offset+int64(loc.Length) > t.pin.Files[f].Size {
				return errcode.New(errcode.Corrupt, "read page index", where,
					"row group %d, column %d: offset index at [%d, +%d) outside the file", g, leaf, loc.Offset, loc.Length)
			}
			wants = append(wants, want{pageKey{f, g, leaf}, loc.Offset, int64(loc.Length)})
		}
	}
	t.cachedPages(md, unindexed)
	slices.SortFunc(wants, func(a, b want) int { return int(a.off - b.off) })
	ra := t.loc.NewReaderAt(ctx, t.pin.Files[f].Object)
	for len(wants) > 0 {
		// One read for the indexes that lie within pageIndexSpan of the first.
		n, end := 1, wants[0].off+wants[0].size
		for n < len(wants) && wants[n].off+wants[n].size-wants[0].off <= pageIndexSpan {
			end = max(end, wants[n].off+wants[n].size)
			n++
		}
		start := wants[0].off
		buf := make([]byte, end-start)
		if !t.pageIndex.tails.read(f, buf, start) {
			if _, err := ra.ReadAt(buf, start); err != nil {
				return err
			}
		}
		for _, w := range wants[:n] {
			locs, err := parseOffsetIndex(buf[w.off-start:w.off-start+w.size], t.pin.Files[f].RowGroups[w.key.group], t.pin.Files[f].Size)
			if err != nil {
				return errcode.Wrap(fmt.Errorf("row group %d, column %d: %w", w.key.group, w.key.leaf, err), errcode.Corrupt, "read page index", where)
			}
			t.pageIndex.m.Store(w.key, locs)
		}
		wants = wants[n:]
	}
	return nil
}

// cachedPages records the page locations the Cache holds of the given
// chunks without an offset index, of one file whose footer is md, and nil
// for the others, keeping what a decode may have learnt (learnPages).
func (t *Table) cachedPages(md *metadata.FileMetaData, keys []pageKey) {
	if len(keys) == 0 {
		return
	}
	found := make([][]byte, len(keys))
	if t.cat != nil {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = t.pagesKey(k)
		}
		found = t.cat.Get(names)
	}
	for i, k := range keys {
		var locs *pageLocs
		if found[i] != nil {
			if chunks, err := leafChunks(md, k.group, []int{k.leaf}); err == nil {
				locs, _ = decodePageLocs(found[i], t.pin.Files[k.file].RowGroups[k.group], chunks[0])
			}
		}
		if locs != nil {
			t.pageIndex.m.Store(k, locs)
		} else {
			t.pageIndex.m.LoadOrStore(k, (*pageLocs)(nil))
		}
	}
}

// learnPages records where the data pages of column chunk key lie, as an
// offset index would say, once a decode has read them: the pages of from,
// then those of from.rest it decoded, which lie at pages (in order, header
// and all), of rows[i] rows and entries[i] level entries each, each
// starting a row; from.rest starts with the chunk's dictionary page when the
// chunk has one (dict) and from has located no page. When the decode
// stopped before the chunk's end (ended is false), the last page it read is
// left out: a row may go on into the page after it. Whatever does not add up
// is not recorded: those pages are then read again, as before.
//
// The decode says where the pages it read lie (plannedPages.read): reading
// their headers again, after a streamed chunk's windows were freed, cost a
// request each on a remote store, one after the other, 50 ms apart.
func (t *Table) learnPages(key pageKey, pages []byteRange, from *pageLocs, dict bool, rows, entries []int64, ended bool) {
	if len(rows) != len(entries) {
		return
	}
	dict = dict && len(from.off) == 0
	if !ended && len(rows) > 0 {
		rows, entries = rows[:len(rows)-1], entries[:len(entries)-1]
	}
	if len(rows) == 0 {
		return
	}
	if v, ok := t.pageIndex.m.Load(key); ok && v.(*pageLocs) != nil && !v.(*pageLocs).partial() {
		return
	}
	locs := &pageLocs{first: slices.Clone(from.first), off: slices.Clone(from.off), size: slices.Clone(from.size),
		entries: from.entries}
	off, end := from.rest.off, from.rest.off+from.rest.n
	for p := range len(rows) + btoi(dict) {
		if p >= len(pages) {
			return
		}
		pg := pages[p]
		if pg.off < off || pg.n <= 0 || pg.off+pg.n > end {
			return
		}
		if p > 0 || !dict {
			i := len(locs.off) - len(from.off)
			if rows[i] <= 0 {
				return
			}
			locs.add(rows[i], pg.off, pg.n)
			locs.entries += entries[i]
		}
		off = pg.off + pg.n
	}
	switch {
	case off < end:
		if ended {
			return
		}
		locs.rest = byteRange{off, end - off}
	case off > end:
		return
	}
	if v, ok := t.pageIndex.m.Load(key); ok && v.(*pageLocs) != nil && len(v.(*pageLocs).off) >= len(locs.off) {
		return // a decode beside this one learnt as much
	}
	t.pageIndex.m.Store(key, locs)
	if !locs.partial() {
		t.remember(key, locs)
	}
}

// pagesAt returns where the first n pages of rest lie, header and all, by
// reading their headers from src; fewer where one does not add up.
func pagesAt(src io.ReaderAt, rest byteRange, n int) []byteRange {
	var pages []byteRange
	off, end := rest.off, rest.off+rest.n
	for range n {
		if off >= end {
			break
		}
		h, err := headerAt(src, byteRange{off, end - off})
		size := int64(h.headerLen) + h.size
		if err != nil || size > end-off {
			break
		}
		pages = append(pages, byteRange{off, size})
		off += size
	}
	return pages
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseOffsetIndex decodes an offset index and checks it against a row group
// of rows rows in a file of size bytes.
func parseOffsetIndex(b []byte, rows, size int64) (locs *pageLocs, err error) {
	defer func() {
		if p := recover(); p != nil { // arrow-go panics on a malformed index
			locs, err = nil, fmt.Errorf("malformed offset index: %v", p)
		}
	}()
	pages := metadata.NewOffsetIndex(b, nil, nil).GetPageLocations()
	if len(pages) == 0 {
		return nil, fmt.Errorf("offset index lists no page")
	}
	locs = &pageLocs{first: make([]int64, len(pages)+1), off: make([]int64, len(pages)), size: make([]int64, len(pages))}
	for i, p := range pages {
		locs.first[i], locs.off[i], locs.size[i] = p.FirstRowIndex, p.Offset, int64(p.CompressedPageSize)
		switch {
		case i == 0 && p.FirstRowIndex != 0, i > 0 && p.FirstRowIndex <= locs.first[i-1], p.FirstRowIndex >= rows:
			return nil, fmt.Errorf("page %d starts at row %d (row group of %d rows)", i, p.FirstRowIndex, rows)
		case p.Offset < 0 || p.CompressedPageSize <= 0 || p.Offset+int64(p.CompressedPageSize) > size,
			i > 0 && p.Offset < locs.off[i-1]+locs.size[i-1]:
			return nil, fmt.Errorf("page %d at [%d, +%d) out of place", i, p.Offset, p.CompressedPageSize)
		}
	}
	locs.first[len(pages)] = rows
	return locs, nil
}

// pagePlan is the data pages of one column chunk a piece needs, and where
// its rows land when only those pages are decoded. A plan with a tail also
// reads the pages not located yet (locs.rest), from the row they start with
// up to the page that ends the last row it needs.
type pagePlan struct {
	locs  *pageLocs
	pages []int   // the located pages needed, ascending
	base  []int64 // for each, the rows of the pages before it in pages
	rows  int64   // rows in them all
	tail  bool
	// limit refuses a page that decodes to more (PageTooLarge, of column):
	// the pages of the tail, not located yet, are sized by their headers
	// before they are decoded. 0: no bound.
	limit  int64
	column string
}

// planPages returns the pages of locs that hold rows (ascending offsets in
// the row group), or nil when that is every page.
func planPages(locs *pageLocs, rows []int64) *pagePlan {
	p := &pagePlan{locs: locs}
	page := -1
	for _, r := range rows {
		if locs.partial() && r >= locs.known() {
			p.tail = true
			break
		}
		if page >= 0 && r < locs.first[page+1] {
			continue
		}
		// The page holding r: the last whose first row is ≤ r.
		page, _ = slices.BinarySearch(locs.first[:len(locs.off)], r+1)
		page--
		p.base = append(p.base, p.rows)
		p.pages = append(p.pages, page)
		p.rows += locs.first[page+1] - locs.first[page]
	}
	if !locs.partial() && len(p.pages) == len(locs.off) {
		return nil
	}
	return p
}

// allPages returns the plan of every page of locs, and of the pages not
// located yet: a whole column chunk read through the page reader that
// sizes each page by its header before it decodes it (see plan).
func allPages(locs *pageLocs) *pagePlan {
	p := &pagePlan{locs: locs, tail: locs.partial()}
	for page := range locs.off {
		p.base = append(p.base, p.rows)
		p.pages = append(p.pages, page)
		p.rows += locs.first[page+1] - locs.first[page]
	}
	return p
}

// row returns where row r of the row group lies among the rows of the
// planned pages; r must lie in one of them, or in the tail.
func (p *pagePlan) row(r int64) int64 {
	if p.tail && r >= p.locs.known() {
		return p.rows + r - p.locs.known()
	}
	i, _ := slices.BinarySearchFunc(p.pages, r, func(page int, r int64) int {
		switch {
		case p.locs.first[page+1] <= r:
			return -1
		case p.locs.first[page] > r:
			return 1
		}
		return 0
	})
	return p.base[i] + r - p.locs.first[p.pages[i]]
}

// sections returns the byte ranges the plan reads of a chunk: its dictionary
// page, if it has one (dict ≥ 0: from dict to the first data page), then each
// run of consecutive planned pages, the tail's pages joining the run before
// them where it reaches them.
func (p *pagePlan) sections(dict int64) []byteRange {
	var out []byteRange
	data := p.locs.rest.off
	if len(p.locs.off) > 0 {
		data = p.locs.off[0]
	}
	if dict >= 0 && dict < data {
		out = append(out, byteRange{dict, data - dict})
	}
	for i, page := range p.pages {
		off, n := p.locs.off[page], p.locs.size[page]
		if k := len(out) - 1; k >= 0 && i > 0 && p.pages[i-1] == page-1 {
			out[k].n = off + n - out[k].off
			continue
		}
		out = append(out, byteRange{off, n})
	}
	if p.tail {
		rest := p.locs.rest
		if k := len(out) - 1; k >= 0 && len(p.pages) > 0 && out[k].off+out[k].n == rest.off {
			out[k].n += rest.n
		} else {
			out = append(out, rest)
		}
	}
	return out
}

// read returns the planned pages of chunk, read from src; a section of
// pages read in one request goes into a buffer of bufs.
func (p *pagePlan) read(src parquet.ReaderAtSeeker, chunk *metadata.ColumnChunkMetaData, bufs *bufferList) *plannedPages {
	window := streamBufferSize(src)
	return &plannedPages{sections: p.sections(dictionaryOffset(chunk)), bufs: bufs, open: func(s byteRange) (*sectionPages, []byte, error) {
		var (
			stream pageStream
			held   []byte
		)
		if b := fetchedBytes(src, s); b != nil {
			stream = &memStream{b: b}
		} else if s.n <= window {
			// A section no larger than a stream's buffer is read in one
			// request: a stream would size its buffer to the section,
			// then grow it to peek at each page header. The page reader
			// copies each page out of the buffer, so it is free again
			// once the section is read.
			held = bufs.get(int(s.n))
			if _, err := src.ReadAt(held, s.off); err != nil {
				bufs.put(held)
				return nil, nil, err
			}
			stream = &memStream{b: held}
		} else {
			stream = newReaderStream(src, s, window, bufs)
		}
		r, err := newSectionPages(stream, s, chunk)
		if err != nil {
			if held != nil {
				bufs.put(held)
			}
			return nil, nil, err
		}
		r.limit, r.column = p.limit, p.column
		return r, held, nil
	}}
}

// dictionaryOffset is where chunk's dictionary page starts, or -1.
func dictionaryOffset(chunk *metadata.ColumnChunkMetaData) int64 {
	if chunk.HasDictionaryPage() && chunk.DictionaryPageOffset() > 0 && chunk.DictionaryPageOffset() < chunk.DataPageOffset() {
		return chunk.DictionaryPageOffset()
	}
	return -1
}

// pageSource yields the pages of a column chunk one at a time, as
// file.PageReader does.
type pageSource interface {
	Next() bool
	Page() file.Page
	Err() error
}

// plannedPages yields the pages of a chunk's planned sections (see
// pagePlan.sections), each read by a page reader of its own.
type plannedPages struct {
	sections []byteRange
	// read are where the pages it yielded lie, header and all, in order:
	// what a decode of a chunk not located learns of its pages without
	// reading their headers again (Table.learnPages).
	read []byteRange
	// open returns a page reader of a section, and the buffer of bufs it
	// reads from (nil if none), to give back once the reader is closed.
	open func(byteRange) (*sectionPages, []byte, error)
	bufs *bufferList
	cur  *sectionPages
	held []byte
	err  error
}

func (pp *plannedPages) Next() bool {
	for pp.err == nil {
		if pp.cur != nil {
			if pp.cur.Next() {
				pp.read = append(pp.read, pp.cur.last)
				return true
			}
			pp.err = pp.cur.Err()
			pp.Close()
			continue
		}
		if len(pp.sections) == 0 {
			return false
		}
		pp.cur, pp.held, pp.err = pp.open(pp.sections[0])
		pp.sections = pp.sections[1:]
	}
	return false
}

func (pp *plannedPages) Page() file.Page { return pp.cur.Page() }

// readFrom returns where the pages it yielded from offset off on lie.
func (pp *plannedPages) readFrom(off int64) []byteRange {
	i, _ := slices.BinarySearchFunc(pp.read, off, func(r byteRange, off int64) int { return cmp.Compare(r.off, off) })
	return pp.read[i:]
}

// takePage hands the buffer of the current page over to the caller, where
// the page reader owns it (see sectionPages.take).
func (pp *plannedPages) takePage() []byte { return pp.cur.take() }

func (pp *plannedPages) Err() error { return pp.err }

// Close closes the page reader of the section being read and frees the
// buffer it read from.
func (pp *plannedPages) Close() {
	if pp.cur != nil {
		pp.cur.Close()
		pp.cur = nil
	}
	if pp.held != nil {
		pp.bufs.put(pp.held)
		pp.held = nil
	}
}

// RowsPerPage says how many rows a data page of the table's widest column
// holds: PageLayout's Rows.
func (t *Table) RowsPerPage(ctx context.Context) (int64, error) {
	l, err := t.PageLayout(ctx)
	return l.Rows, err
}

// PageLayout describes the data pages of a table's widest column (the leaf
// column with the most bytes before compression), in the first row group of
// its first file that has rows.
type PageLayout struct {
	Column   string // the column's path, dotted
	Rows     int64  // rows a page holds: see PageLayout
	RowBytes int64  // the column's bytes before compression per row, at least 1
}

// Coarse says whether the pages hold at least four times the rows that pages
// of DefaultPageBytes, croupier's layout, would: a shuffled read then decodes
// many rows for each it takes, and a rewrite (Rewrite) would pay.
func (l PageLayout) Coarse() bool {
	return l.Rows >= 4*max(1, DefaultPageBytes/l.RowBytes)
}

// PageLayout returns the layout of the table's widest column. Its rows per
// page are the median over its pages, where the file has an offset index,
// else the row group's rows over the pages its uncompressed size makes at
// the writers' default page size. They are between 1 and that row group's
// rows; the zero PageLayout is that of a table without rows. PageStarts gives
// where every page of each row group's widest column starts.
func (t *Table) PageLayout(ctx context.Context) (PageLayout, error) {
	f := slices.IndexFunc(t.pin.Files, func(f File) bool { return len(f.RowGroups) > 0 && f.RowGroups[0] > 0 })
	if f < 0 {
		return PageLayout{}, nil
	}
	md, err := t.Footer(ctx, f)
	if err != nil {
		return PageLayout{}, err
	}
	rows := t.pin.Files[f].RowGroups[0]
	widest, size := 0, int64(-1)
	for leaf := range md.Schema.NumColumns() {
		col, err := md.RowGroup(0).ColumnChunk(leaf)
		if err != nil {
			return PageLayout{}, errcode.Wrap(err, errcode.Corrupt, "read footer", t.loc.ObjectURI(t.pin.Files[f].Key))
		}
		if n := col.TotalUncompressedSize(); n > size {
			widest, size = leaf, n
		}
	}
	l := PageLayout{Column: md.Schema.Column(widest).Path(), RowBytes: max(1, size/rows)}
	locs, err := t.pages(ctx, f, 0, []int{widest})
	if err != nil {
		return PageLayout{}, err
	}
	if p := locs[0]; p != nil {
		counts := make([]int64, len(p.off))
		for i := range counts {
			counts[i] = p.first[i+1] - p.first[i]
		}
		slices.Sort(counts)
		l.Rows = counts[len(counts)/2]
		return l, nil
	}
	pages := max(1, (size+defaultPageBytes-1)/defaultPageBytes)
	l.Rows = max(1, rows/pages)
	return l, nil
}

// PageStarts returns where the data pages of the table's row groups start,
// as row ids ascending from 0: the first row of every row group with rows,
// and the first row of every later page of that row group's widest column,
// the leaf column with the most bytes before compression in it (the first
// such leaf in schema order where several tie). The pages come from the
// chunk's offset index; a chunk without one counts as P = max(1,
// ⌈bytes / 1 MiB⌉) pages of ⌊rows / P⌋ rows (at least 1), the last taking the
// rest, so that the starts depend on the table version alone, never on what
// reads have learnt. It reads every file's footer and the offset index of one
// column per row group, and holds 8 bytes a page (see
// permutation.AutoClump).
func (t *Table) PageStarts(ctx context.Context) ([]int64, error) {
	starts := []int64{}
	for i, ref := range t.groups {
		rows := t.groupRows(i)
		if rows == 0 {
			continue
		}
		firsts, err := t.widestPageFirsts(ctx, ref.File, ref.Group, rows)
		if err != nil {
			return nil, err
		}
		for _, r := range firsts {
			starts = append(starts, t.groupStarts[i]+r)
		}
	}
	return starts, nil
}

// widestPageFirsts returns the first row of each page of the widest column
// of row group g of file f, which holds rows rows (see PageStarts).
func (t *Table) widestPageFirsts(ctx context.Context, f, g int, rows int64) ([]int64, error) {
	md, err := t.Footer(ctx, f)
	if err != nil {
		return nil, err
	}
	where := t.loc.ObjectURI(t.pin.Files[f].Key)
	widest, size, indexed := 0, int64(-1), false
	for leaf := range md.Schema.NumColumns() {
		col, err := md.RowGroup(g).ColumnChunk(leaf)
		if err != nil {
			return nil, errcode.Wrap(fmt.Errorf("row group %d: %w", g, err), errcode.Corrupt, "read footer", where)
		}
		if n := col.TotalUncompressedSize(); n > size {
			widest, size, indexed = leaf, n, hasOffsetIndex(col)
		}
	}
	if indexed {
		locs, err := t.pages(ctx, f, g, []int{widest})
		if err != nil {
			return nil, err
		}
		if p := locs[0]; p != nil && !p.partial() {
			return slices.Clone(p.first[:len(p.off)]), nil
		}
	}
	pages := max(1, (size+defaultPageBytes-1)/defaultPageBytes)
	per := max(1, rows/pages)
	firsts := make([]int64, 0, min(pages, rows))
	for r := int64(0); r < rows && int64(len(firsts)) < pages; r += per {
		firsts = append(firsts, r)
	}
	return firsts, nil
}

// readerStream is a pageStream over the bytes [off, end) of src, read a
// window at a time into a buffer of bufs (the decoders' section buffers),
// given back by Close. arrow-go's buffered stream allocated a window's
// buffer for each section it streamed, a quarter of the bytes a full
// shuffle allocated on the Go heap (the collector, held to the budget's
// share by the memory limit, then ran several times a second), and copied
// each page out of it. Peek grows the buffer to hold a whole page, so a
// compressed page is decompressed from where it lies.
type readerStream struct {
	src      io.ReaderAt
	off, end int64  // the next byte of src to read into buf, and the section's end
	buf      []byte // buf[r:w] is read and not consumed
	r, w     int
	window   int
	bufs     *bufferList
}

func newReaderStream(src io.ReaderAt, s byteRange, window int64, bufs *bufferList) *readerStream {
	return &readerStream{src: src, off: s.off, end: s.off + s.n, window: int(max(min(window, s.n), 1)), bufs: bufs}
}

// fill reads until n bytes are buffered or the section ends.
func (s *readerStream) fill(n int) error {
	if s.w-s.r >= n {
		return nil
	}
	if len(s.buf) < n {
		grown := s.bufs.get(max(n, s.window))
		grown = grown[:cap(grown)]
		s.w = copy(grown, s.buf[s.r:s.w])
		s.r = 0
		if s.buf != nil {
			s.bufs.put(s.buf)
		}
		s.buf = grown
	} else if s.r > 0 && s.r+n > len(s.buf) { // the unread bytes to the front
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	for s.w-s.r < n && s.off < s.end {
		k := int(min(int64(len(s.buf)-s.w), s.end-s.off))
		m, err := s.src.ReadAt(s.buf[s.w:s.w+k], s.off)
		s.w += m
		s.off += int64(m)
		if m < k {
			return cmp.Or(err, io.ErrUnexpectedEOF)
		}
	}
	if s.w-s.r < n {
		return io.EOF
	}
	return nil
}

// Peek returns the next n bytes, or what is left and io.EOF.
func (s *readerStream) Peek(n int) ([]byte, error) {
	if n < 0 {
		return nil, bufio.ErrNegativeCount
	}
	err := s.fill(n)
	return s.buf[s.r:min(s.r+n, s.w)], err
}

// Discard skips the next n bytes.
func (s *readerStream) Discard(n int) (int, error) {
	if n < 0 {
		return 0, bufio.ErrNegativeCount
	}
	if n <= s.w-s.r {
		s.r += n
		return n, nil
	}
	skip := int64(n - (s.w - s.r))
	s.r, s.w = 0, 0
	if skip > s.end-s.off {
		done := n - int(skip-(s.end-s.off))
		s.off = s.end
		return done, io.EOF
	}
	s.off += skip
	return n, nil
}

// Read copies the next bytes into p; a read of a window or more with none
// buffered goes straight into p.
func (s *readerStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.r == s.w && len(p) >= s.window {
		k := int(min(int64(len(p)), s.end-s.off))
		if k == 0 {
			return 0, io.EOF
		}
		m, err := s.src.ReadAt(p[:k], s.off)
		s.off += int64(m)
		if m < k {
			return m, cmp.Or(err, io.ErrUnexpectedEOF)
		}
		return m, nil
	}
	if err := s.fill(1); err != nil && s.r == s.w {
		return 0, err
	}
	n := copy(p, s.buf[s.r:s.w])
	s.r += n
	return n, nil
}

// Close gives the buffer back.
func (s *readerStream) Close() {
	if s.buf != nil {
		s.bufs.put(s.buf)
		s.buf, s.r, s.w = nil, 0, 0
	}
}

// memStream is a pageStream over a section of pages already in memory, a
// slice of a fetched range: the page reader peeks at page headers and reads
// page bodies where they lie, where a buffered stream would copy each page
// into a buffer of its own first (a new one for every section).
type memStream struct{ b []byte }

// Peek returns the next n bytes, or what is left and io.EOF.
func (m *memStream) Peek(n int) ([]byte, error) {
	if n < 0 {
		return nil, bufio.ErrNegativeCount
	}
	if n > len(m.b) {
		return m.b, io.EOF
	}
	return m.b[:n], nil
}

// Discard skips the next n bytes.
func (m *memStream) Discard(n int) (int, error) {
	if n < 0 {
		return 0, bufio.ErrNegativeCount
	}
	if n > len(m.b) {
		n = len(m.b)
		m.b = nil
		return n, io.EOF
	}
	m.b = m.b[n:]
	return n, nil
}

// Read copies the next bytes into p.
func (m *memStream) Read(p []byte) (int, error) {
	if len(m.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, m.b)
	m.b = m.b[n:]
	return n, nil
}

// scanPages locates the data pages of a flat column's chunk, one of a file
// without an offset index, by their headers alone: a read of each header,
// not of the pages. A data page of a flat column holds a row for each of its
// values (V1) or says its rows (V2). It returns nil when what the headers
// say does not add up to the chunk: its pages are then found as they are
// read, as before.
func scanPages(src io.ReaderAt, chunk byteRange, rows int64) *pageLocs {
	locs := &pageLocs{first: []int64{0}}
	off, end := chunk.off, chunk.off+chunk.n
	for off < end {
		var (
			h   *tStruct
			n   int
			err error
		)
		for want := min(end-off, firstHeaderBytes); ; want = min(end-off, 4*want) {
			buf := scratch{}.Allocate(int(want))
			if _, err = src.ReadAt(buf, off); err == nil {
				h, n, err = decodeStruct(buf)
			}
			scratch{}.Free(buf)
			if !errors.Is(err, errShortHeader) || want >= end-off {
				break
			}
		}
		if err != nil {
			return nil
		}
		typ, _ := h.int(pageHeaderType)
		stored, _ := h.int(pageHeaderCompressedSize)
		size := int64(n) + stored
		if stored < 0 || size > end-off {
			return nil
		}
		var pageRows int64
		switch typ {
		case pageTypeDataV1:
			if sub := h.child(pageHeaderDataV1); sub != nil {
				pageRows, _ = sub.int(pageNumValues)
			}
		case pageTypeDataV2:
			if sub := h.child(pageHeaderDataV2); sub != nil {
				pageRows, _ = sub.int(pageV2Rows)
			}
		default: // a dictionary or index page
			off += size
			continue
		}
		if pageRows <= 0 {
			return nil
		}
		locs.add(pageRows, off, size)
		off += size
	}
	if off != end || locs.known() != rows {
		return nil
	}
	return locs
}

// locatePages locates by scanPages the pages of the flat leaf columns of row
// group g of file f that neither an offset index nor a read has located
// yet, on local files (a header a read: on a remote store, a round trip
// each), and keeps them as a read keeps what it learns.
func (r *Reader) locatePages(ctx context.Context, f, g int, leaves []int, locs []*pageLocs) error {
	for i, leaf := range leaves {
		if locs[i] != nil && !locs[i].partial() {
			continue
		}
		l, err := r.scanChunk(ctx, f, g, leaf)
		if err != nil {
			return err
		}
		if l != nil {
			key := pageKey{f, g, leaf}
			r.t.pageIndex.m.Store(key, l)
			r.t.remember(key, l)
			locs[i] = l
		}
	}
	return nil
}

// scanChunk returns the pages of leaf column leaf's chunk in row group g of
// file f as scanPages locates them, or nil where it does not: on a remote
// store, for a nested column, or where the headers do not add up. The
// answer depends on the file alone, not on what any read has learnt.
func (r *Reader) scanChunk(ctx context.Context, f, g, leaf int) (*pageLocs, error) {
	t := r.t
	if t.Remote() {
		return nil, nil
	}
	md, err := t.Footer(ctx, f)
	if err != nil {
		return nil, err
	}
	if md.Schema.Column(leaf).MaxRepetitionLevel() != 0 {
		return nil, nil
	}
	chunks, err := leafChunks(md, g, []int{leaf})
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Corrupt, "read", t.loc.ObjectURI(t.pin.Files[f].Key))
	}
	src := t.loc.NewReaderAt(ctx, t.pin.Files[f].Object).CountInto(&r.stats.reads)
	return scanPages(src, chunks[0], t.pin.Files[f].RowGroups[g]), nil
}
