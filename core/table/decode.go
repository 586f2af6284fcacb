package table

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// Decoding is most of a loader's CPU time, and the columns training reads
// most are few in kind: token ids as lists of integers, scalars, text. For
// those, pqarrow's general record reader (level by level record delimiting,
// buffers grown as it goes) costs about three times what the decoding
// itself does. decodeColumn decodes them directly from the pages: levels
// and dictionary indices run by run, values into buffers allocated at their
// final size. It handles one leaf column whose Arrow type is a 32/64-bit
// integer or float, a string or binary (large ones too), or a list of those
// numbers, stored with PLAIN or dictionary encoding; Reader.decode leaves
// every other column to the general codec (pqarrow).
//
// A shuffle keeps a few rows of each page it decodes. decodeColumn takes the
// rows to keep and copies only theirs: levels are decoded whole (they say
// where rows start), values only for the rows kept, so a page costs its
// decompression and not a copy of every value into a column that is then
// gathered from.

// fastKind says how decodeColumn decodes a column, or that it does not.
type fastKind int

const (
	notFast  fastKind = iota
	fastFlat          // a number, string or binary
	fastList          // a list of numbers
)

// fastColumn reports how decodeColumn can decode field f stored as leaf col
// in chunk.
func fastColumn(f arrow.Field, col *schema.Column, chunk *metadata.ColumnChunkMetaData) fastKind {
	for _, e := range chunk.Encodings() {
		switch e {
		case parquet.Encodings.Plain, parquet.Encodings.RLE, parquet.Encodings.PlainDict, parquet.Encodings.RLEDict:
		default:
			return notFast
		}
	}
	nullable := 0
	if f.Nullable {
		nullable = 1
	}
	if col.MaxRepetitionLevel() == 0 {
		if physicalMatches(f.Type, col.PhysicalType(), true) && int(col.MaxDefinitionLevel()) == nullable {
			return fastFlat
		}
		return notFast
	}
	lt, ok := f.Type.(*arrow.ListType)
	if !ok || col.MaxRepetitionLevel() != 1 || !physicalMatches(lt.Elem(), col.PhysicalType(), false) {
		return notFast
	}
	elemNullable := 0
	if lt.ElemField().Nullable {
		elemNullable = 1
	}
	if int(col.MaxDefinitionLevel()) != nullable+1+elemNullable {
		return notFast
	}
	return fastList
}

// physicalMatches reports whether Arrow type dt is the plain reading of
// Parquet physical type pt (no logical conversion), with binary types
// allowed only when allowBinary.
func physicalMatches(dt arrow.DataType, pt parquet.Type, allowBinary bool) bool {
	want, ok := pagePhysical(dt, allowBinary)
	return ok && want == pt
}

// pagePhysical returns the Parquet physical type the page decoder reads
// Arrow type dt from, and whether it reads dt at all (binary types only when
// allowBinary).
func pagePhysical(dt arrow.DataType, allowBinary bool) (parquet.Type, bool) {
	switch dt.ID() {
	case arrow.INT32:
		return parquet.Types.Int32, true
	case arrow.INT64, arrow.DURATION: // a duration is its count of units
		return parquet.Types.Int64, true
	case arrow.FLOAT32:
		return parquet.Types.Float, true
	case arrow.FLOAT64:
		return parquet.Types.Double, true
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		return parquet.Types.ByteArray, allowBinary
	}
	return 0, false
}

// pageDecoded reports whether the page decoder reads a column of type dt
// where the file stores it plainly (fastColumn says for a given chunk).
func pageDecoded(dt arrow.DataType) bool {
	if lt, ok := dt.(*arrow.ListType); ok {
		_, ok := pagePhysical(lt.Elem(), false)
		return ok
	}
	_, ok := pagePhysical(dt, true)
	return ok
}

// columnDecoder accumulates one column chunk's values page by page.
//
// A slot is a row of a flat column or an element of a list, null or not.
// Definition levels say, for each level entry, how far down the schema it is
// defined: below listDef the list (row) is null, at listDef it is empty, at
// slotDef or above an element slot exists, and at maxDef it holds a value.
// For a flat column every entry is a slot (slotDef 0).
type columnDecoder struct {
	outer   arrow.DataType // of the column
	dt      arrow.DataType // of its values: the list's elements, or outer
	width   int            // bytes of one fixed-width value; 0 for binary
	list    bool
	listDef int16
	slotDef int16
	maxDef  int16
	maxRep  int16

	dict    []byte   // fixed-width dictionary values, width bytes each, in dictBuf
	dictBin [][]byte // binary dictionary values, in dictBuf
	dictBuf []byte   // from scratch, or the page's own (taken)
	taken   bool     // dictBuf is the page reader's buffer of the dictionary page, taken over: freed with freePage

	defs, reps []uint8  // levels of the current page, from scratch
	idx        []uint32 // dictionary indices of the current page, in idxBuf
	idxBuf     []byte   // from scratch

	values    *memory.Buffer // fixed width: present values, in order
	nvalues   int            // present values decoded so far
	maxValues int            // level entries of the chunk: no more values than that
	binOffs   []int32        // binary: offsets of present values in bin, plus one
	bin       *memory.Buffer // binary: the present values' bytes, bin.Len() of them so far
	valid     []bool         // per slot; nil until a null slot appears
	slots     int

	rows      int     // rows started so far (lists)
	listOffs  []int32 // lists: the first slot of each row, plus one
	listValid []bool  // lists: per row; nil until a null list appears

	keep     []int64 // rows to keep, ascending; nil keeps every row
	next     int     // keep[next] is the next row to keep
	seen     int64   // rows in the pages decoded so far
	pageRows []int64 // rows of each data page so far; nil once one starts inside a row
	starts   []int   // lists: level entries that start a row, of the current page
	runs     []run   // level entries and values of the current page to keep
}

// run is level entries [e0, e1) of a page, whose present values are [v0, v1).
type run struct{ e0, e1, v0, v1 int }

// decodeInfo is what decodeColumn did besides its column: the bytes of the
// pages it decoded, the rows of each data page (nil when a page starts
// inside a row), the level entries each data page's header counts, the rows
// the pages it decoded hold, and whether it read them to their end.
type decodeInfo struct {
	bytes       int64
	pageRows    []int64
	pageEntries []int64
	rows        int64
	ended       bool
}

// entries returns the level entries of data pages [from:] of those decoded.
func (did decodeInfo) entries(from int) int64 {
	var n int64
	for _, e := range did.pageEntries[min(from, len(did.pageEntries)):] {
		n += e
	}
	return n
}

// keptValuesStart is the fewest values a decoder of kept rows has room for
// at first; it doubles as they come.
const keptValuesStart = 1 << 14

// openRows, as the rows of decodeColumn's pages, says that they go on past
// the rows it needs: it stops after the page that ends the last row it keeps.
const openRows = -1

// decodeColumn decodes a column chunk that fastColumn accepted, whose pages
// pr reads hold rows rows (or openRows): of them, the rows in keep
// (ascending, distinct), or all when keep is nil.
func decodeColumn(mem memory.Allocator, f arrow.Field, col *schema.Column, kind fastKind,
	chunk *metadata.ColumnChunkMetaData, pr pageSource, rows int64, keep []int64) (arrow.Array, decodeInfo, error) {
	d := newColumnDecoder(mem, f, col, kind, chunk.NumValues(), keep, rows)
	defer d.free()
	did := decodeInfo{ended: true}
	for pr.Next() {
		p := pr.Page()
		did.bytes += int64(len(p.Data()))
		if _, dict := p.(*file.DictionaryPage); !dict {
			did.pageEntries = append(did.pageEntries, int64(p.NumValues()))
		} else if t, ok := pr.(pageTaker); ok {
			d.takeDictionary(t.takePage())
		}
		if err := d.page(p); err != nil {
			return nil, did, err
		}
		if rows == openRows && d.kept() {
			did.ended = false
			break
		}
	}
	if err := pr.Err(); err != nil {
		return nil, did, err
	}
	if rows == openRows {
		rows = d.seen
	}
	arr, err := d.finish(mem, rows)
	did.pageRows, did.rows = d.pageRows, d.seen
	return arr, did, err
}

// newColumnDecoder returns a decoder of a column of field f, stored as col,
// of at most values level entries, keeping the rows in keep (nil: all of
// rows).
func newColumnDecoder(mem memory.Allocator, f arrow.Field, col *schema.Column, kind fastKind, values int64, keep []int64, rows int64) *columnDecoder {
	d := &columnDecoder{maxDef: col.MaxDefinitionLevel(), maxRep: col.MaxRepetitionLevel(), keep: keep, outer: f.Type, dt: f.Type,
		pageRows: []int64{}}
	out := rows
	if keep != nil {
		out = int64(len(keep))
	}
	if kind == fastList {
		lt := f.Type.(*arrow.ListType)
		d.dt = lt.Elem()
		d.list = true
		d.slotDef = d.maxDef
		if lt.ElemField().Nullable {
			d.slotDef--
		}
		d.listDef = d.slotDef - 1
		d.listOffs = make([]int32, 0, out+1)
	}
	if fw, ok := d.dt.(arrow.FixedWidthDataType); ok {
		d.width = fw.BitWidth() / 8
		d.maxValues = int(values)
		// Never more values than level entries in the chunk, so a whole
		// chunk is sized at once. Of kept rows, which may be a few of a
		// large chunk (a row group of a million rows, read in slices), the
		// buffer starts at the kept rows' share of the chunk's values and
		// a quarter more (their lists' lengths vary), and grows with the
		// values kept: growing from a fixed start copied the values of a
		// full shuffle's pieces twice over. It is not zeroed (elements
		// zeroes the slots of nulls).
		n := values
		if keep != nil {
			n = min(values, max(keptValuesStart, int64(len(keep))*values/max(rows, 1)*5/4))
		}
		d.values = newFilled(mem, n*int64(d.width))
	} else {
		d.binOffs = append(make([]int32, 0, out+1), 0)
		d.bin = memory.NewResizableBuffer(mem)
	}
	return d
}

// free gives back what the decoder holds.
func (d *columnDecoder) free() {
	if d.values != nil {
		d.values.Release()
	}
	if d.bin != nil {
		d.bin.Release()
	}
	for _, b := range [][]byte{d.defs, d.reps, d.idxBuf} {
		scratch{}.Free(b)
	}
	d.freeDict()
}

// freeDict gives back the dictionary's buffer, scratch or a page's taken
// over (freePage frees either).
func (d *columnDecoder) freeDict() {
	freePage(d.dictBuf)
	d.dictBuf, d.taken = nil, false
}

// page decodes one page.
func (d *columnDecoder) page(p file.Page) error {
	switch p := p.(type) {
	case *file.DictionaryPage:
		return d.dictionary(p.Data(), int(p.NumValues()))
	case *file.DataPageV1:
		if p.RepetitionLevelEncoding() != parquet.Encodings.RLE || p.DefinitionLevelEncoding() != parquet.Encodings.RLE {
			return errFastUnsupported
		}
		data, n := p.Data(), int(p.NumValues())
		var err error
		if data, err = levelsV1(data, n, d.maxRep, &d.reps); err != nil {
			return err
		}
		if data, err = levelsV1(data, n, d.maxDef, &d.defs); err != nil {
			return err
		}
		return d.dataPage(data, parquet.Encoding(p.Encoding()), n)
	case *file.DataPageV2:
		data, n := p.Data(), int(p.NumValues())
		rl, dl := int(p.RepetitionLevelByteLen()), int(p.DefinitionLevelByteLen())
		if rl+dl > len(data) {
			return fmt.Errorf("page levels of %d bytes overrun a page of %d", rl+dl, len(data))
		}
		if err := levels(data[:rl], n, d.maxRep, &d.reps); err != nil {
			return err
		}
		if err := levels(data[rl:rl+dl], n, d.maxDef, &d.defs); err != nil {
			return err
		}
		return d.dataPage(data[rl+dl:], parquet.Encoding(p.Encoding()), n)
	}
	return errFastUnsupported
}

var errFastUnsupported = errors.New("unsupported page kind or encoding")

// levelsV1 decodes n levels of a V1 page (a 4-byte length, then the RLE
// data) into *dst and returns the rest of the page.
func levelsV1(data []byte, n int, max int16, dst *[]uint8) ([]byte, error) {
	if max == 0 {
		*dst = (*dst)[:0]
		return data, nil
	}
	if len(data) < 4 {
		return nil, errors.New("truncated levels")
	}
	size := int(binary.LittleEndian.Uint32(data))
	if size > len(data)-4 {
		return nil, fmt.Errorf("levels of %d bytes overrun the page", size)
	}
	return data[4+size:], levels(data[4:4+size], n, max, dst)
}

// levels decodes n levels of at most max into *dst (empty when max is 0).
func levels(data []byte, n int, max int16, dst *[]uint8) error {
	if max == 0 {
		*dst = (*dst)[:0]
		return nil
	}
	*dst = growScratch(*dst, n)
	width := bits.Len16(uint16(max))
	if err := hybrid(*dst, data, width); err != nil {
		return err
	}
	if int(max) == 1<<width-1 {
		return nil // width bits hold no larger level
	}
	for _, l := range *dst {
		if int16(l) > max {
			return fmt.Errorf("level %d above the maximum %d", l, max)
		}
	}
	return nil
}

// hybrid decodes len(dst) values of the RLE/bit-packed hybrid encoding of
// the given bit width.
func hybrid[T uint8 | uint32](dst []T, data []byte, width int) error {
	if width > 32 {
		return fmt.Errorf("bit width %d", width)
	}
	byteWidth := (width + 7) / 8
	for i := 0; i < len(dst); {
		header, n := binary.Uvarint(data)
		if n <= 0 {
			return errors.New("truncated RLE run header")
		}
		data = data[n:]
		if header&1 == 0 { // an RLE run: one value repeated
			if len(data) < byteWidth {
				return errors.New("truncated RLE run")
			}
			var v uint32
			for b := range byteWidth {
				v |= uint32(data[b]) << (8 * b)
			}
			data = data[byteWidth:]
			if uint64(v) >= 1<<width {
				return fmt.Errorf("RLE value %d does not fit %d bits", v, width)
			}
			fill := dst[i:min(len(dst), i+int(min(header>>1, uint64(len(dst)))))]
			if len(fill) > 0 { // doubling copies: levels come in runs of thousands
				fill[0] = T(v)
				for k := 1; k < len(fill); k *= 2 {
					copy(fill[k:], fill[:k])
				}
			}
			i += len(fill)
			continue
		}
		groups := header >> 1 // bit-packed groups of 8 values
		if groups == 0 || groups > uint64(len(dst)) {
			return errors.New("bad bit-packed run")
		}
		size := min(int(groups)*width, len(data)) // a last run may be cut short
		count := min(int(groups)*8, len(dst)-i)
		if size*8 < count*width {
			return errors.New("truncated bit-packed run")
		}
		unpack(dst[i:i+count], data[:size], width)
		data = data[size:]
		i += count
	}
	return nil
}

// unpack reads len(dst) values of width bits (at most 32), packed least
// significant bit first, from packed. Each value is one unaligned 64-bit
// load, a shift and a mask, eight values to an iteration (a group of eight
// starts on a byte); the last few values, whose load would run past packed,
// go through a padded copy.
func unpack[T uint8 | uint32](dst []T, packed []byte, width int) {
	mask := uint64(1)<<width - 1
	fast := len(dst)
	for fast > 0 && ((fast-1)*width)/8+8 > len(packed) {
		fast--
	}
	w := uint(width)
	k := 0
	if width == 16 { // the common width of token ids: plain 16-bit loads
		for ; k < len(dst); k++ {
			dst[k] = T(binary.LittleEndian.Uint16(packed[2*k:]))
		}
		return
	}
	for ; k+8 <= fast; k += 8 {
		g := packed[k*width/8:]
		d := dst[k : k+8 : k+8]
		d[0] = T(binary.LittleEndian.Uint64(g) & mask)
		d[1] = T(binary.LittleEndian.Uint64(g[w/8:]) >> (w % 8) & mask)
		d[2] = T(binary.LittleEndian.Uint64(g[2*w/8:]) >> (2 * w % 8) & mask)
		d[3] = T(binary.LittleEndian.Uint64(g[3*w/8:]) >> (3 * w % 8) & mask)
		d[4] = T(binary.LittleEndian.Uint64(g[4*w/8:]) >> (4 * w % 8) & mask)
		d[5] = T(binary.LittleEndian.Uint64(g[5*w/8:]) >> (5 * w % 8) & mask)
		d[6] = T(binary.LittleEndian.Uint64(g[6*w/8:]) >> (6 * w % 8) & mask)
		d[7] = T(binary.LittleEndian.Uint64(g[7*w/8:]) >> (7 * w % 8) & mask)
	}
	for ; k < fast; k++ {
		bit := k * width
		dst[k] = T(binary.LittleEndian.Uint64(packed[bit/8:]) >> (bit % 8) & mask)
	}
	if fast == len(dst) {
		return
	}
	var pad [48]byte
	from := (fast * width) / 8
	copy(pad[:], packed[from:])
	for k := fast; k < len(dst); k++ {
		bit := k*width - from*8
		dst[k] = T(binary.LittleEndian.Uint64(pad[bit/8:]) >> (bit % 8) & mask)
	}
}

// pageTaker is a pageSource that can hand the buffer of its current page
// over (plannedPages).
type pageTaker interface{ takePage() []byte }

// takeDictionary takes over buf, the page reader's buffer of the dictionary
// page about to be decoded (nil: the reader keeps it).
func (d *columnDecoder) takeDictionary(buf []byte) {
	if buf == nil {
		return
	}
	d.freeDict()
	d.dictBuf, d.taken = buf, true
}

// dictionary records a dictionary page's values.
func (d *columnDecoder) dictionary(data []byte, n int) error {
	// Where the page's buffer is the page reader's, the values are copied
	// into scratch (a dictionary can be a megabyte, and one is read for
	// every column chunk decoded), freed with the decoder; where the
	// decoder took the buffer over (takeDictionary), they are read where
	// they lie: a dictionary of a column of large values, 121 MB in a table
	// of pyarrow's, was held twice.
	own := d.taken && len(data) > 0 && len(d.dictBuf) > 0 && &data[0] == &d.dictBuf[0]
	if d.width > 0 {
		if n < 0 || len(data) < n*d.width {
			return fmt.Errorf("dictionary of %d values in %d bytes", n, len(data))
		}
		if !own {
			d.dictBuf = d.scratchDict(n * d.width)
			data = d.dictBuf[:copy(d.dictBuf, data[:n*d.width])]
		}
		d.dict = data[:n*d.width]
		return nil
	}
	if n < 0 || n > len(data)/4 {
		return fmt.Errorf("dictionary of %d values in %d bytes", n, len(data))
	}
	if !own {
		d.dictBuf = d.scratchDict(len(data))
		data = d.dictBuf[:copy(d.dictBuf, data)]
	}
	d.dictBin = make([][]byte, n)
	for i := range d.dictBin {
		v, rest, err := plainBinary(data)
		if err != nil {
			return err
		}
		d.dictBin[i], data = v, rest
	}
	return nil
}

// scratchDict returns room for n bytes of dictionary values from scratch.
func (d *columnDecoder) scratchDict(n int) []byte {
	if d.taken {
		d.freeDict()
	}
	return growScratch(d.dictBuf, n)
}

// plainBinary splits the first PLAIN byte array off data.
func plainBinary(data []byte) (value, rest []byte, err error) {
	if len(data) < 4 {
		return nil, nil, errors.New("truncated byte array")
	}
	size := binary.LittleEndian.Uint32(data)
	if uint64(size) > uint64(len(data)-4) {
		return nil, nil, errors.New("truncated byte array")
	}
	return data[4 : 4+size], data[4+size:], nil
}

// dataPage takes one data page of n level entries: the rows it keeps, their
// slots and nulls from the levels, and their present values from data.
func (d *columnDecoder) dataPage(data []byte, enc parquet.Encoding, n int) error {
	if enc != parquet.Encodings.Plain && enc != parquet.Encodings.PlainDict && enc != parquet.Encodings.RLEDict {
		return errFastUnsupported
	}
	if err := d.pick(n); err != nil {
		return err
	}
	for _, r := range d.runs {
		d.shape(r.e0, r.e1)
	}
	present := d.valueRuns(n)
	if enc == parquet.Encodings.Plain {
		return d.plain(data, present)
	}
	return d.indexed(data, present)
}

// kept reports whether the pages decoded so far hold every row to keep
// whole: a row after the last one kept has started (a flat column's rows
// never go on into the next page).
func (d *columnDecoder) kept() bool {
	if len(d.keep) == 0 || d.next < len(d.keep) {
		return false
	}
	last := d.keep[len(d.keep)-1]
	if d.list {
		return d.seen > last+1
	}
	return d.seen > last
}

// pick finds the rows of a page of n level entries and sets d.runs to the
// level entries and values of those it keeps.
func (d *columnDecoder) pick(n int) error {
	d.runs = d.runs[:0]
	// The page's rows start at these level entries.
	rows := n
	if d.list {
		reps := d.reps[:n]
		if d.seen == 0 && n > 0 && reps[0] != 0 {
			return errors.New("the column chunk starts inside a list")
		}
		d.starts = d.starts[:0]
		for i := 0; ; i++ {
			k := bytes.IndexByte(reps[i:], 0)
			if k < 0 {
				break
			}
			i += k
			d.starts = append(d.starts, i)
		}
		rows = len(d.starts)
	}
	start := func(r int) int { // level entry that starts row r of the page (n: the end)
		switch {
		case r == rows:
			return n
		case d.list:
			return d.starts[r]
		}
		return r
	}
	first := d.seen
	d.seen += int64(rows)
	if n > 0 && start(0) > 0 {
		d.pageRows = nil // pages that split rows cannot be read alone
	} else if d.pageRows != nil {
		d.pageRows = append(d.pageRows, int64(rows))
	}
	if d.keep == nil {
		if n > 0 {
			d.runs = append(d.runs, run{e0: 0, e1: n})
		}
		return nil
	}
	// A page may start inside the last row of the page before: its first
	// entries are kept if that row is.
	if start(0) > 0 && d.next > 0 && d.keep[d.next-1] == first-1 {
		d.runs = append(d.runs, run{e0: 0, e1: start(0)})
	}
	for d.next < len(d.keep) && d.keep[d.next] < d.seen {
		a := d.keep[d.next]
		if a < first {
			return fmt.Errorf("row %d to keep is out of order", a)
		}
		b := a + 1
		for d.next++; d.next < len(d.keep) && d.keep[d.next] == b && b < d.seen; d.next++ {
			b++
		}
		d.runs = append(d.runs, run{e0: start(int(a - first)), e1: start(int(b - first))})
	}
	return nil
}

// count returns how many of level entries [from, to) of the page hold a
// value.
func (d *columnDecoder) count(from, to int) int {
	if len(d.defs) == 0 {
		return to - from
	}
	n := 0
	for _, l := range d.defs[from:to] {
		if int16(l) == d.maxDef {
			n++
		}
	}
	return n
}

// allDefined reports whether every level entry of defs holds a value.
// It compares eight levels at a time.
func (d *columnDecoder) allDefined(defs []uint8) bool {
	want := uint64(uint8(d.maxDef)) * 0x0101010101010101
	for len(defs) >= 8 {
		if binary.LittleEndian.Uint64(defs) != want {
			return false
		}
		defs = defs[8:]
	}
	for _, l := range defs {
		if int16(l) != d.maxDef {
			return false
		}
	}
	return true
}

// shape takes the rows, slots and nulls of level entries [e0, e1) of a
// page.
func (d *columnDecoder) shape(e0, e1 int) {
	if len(d.defs) == 0 || d.allDefined(d.defs[e0:e1]) { // no nulls, no empty lists: the common case, kept tight
		if d.list {
			// Rows start at the zeros, found with a vectorized search: lists
			// of training data are hundreds of values long.
			reps := d.reps[e0:e1]
			for i := 0; ; i++ {
				k := bytes.IndexByte(reps[i:], 0)
				if k < 0 {
					break
				}
				i += k
				d.listOffs = append(d.listOffs, int32(d.slots+i))
				appendValid(&d.listValid, d.rows, true)
				d.rows++
			}
		}
		if d.valid != nil {
			for range e1 - e0 {
				d.valid = append(d.valid, true)
			}
		}
		d.slots += e1 - e0
		return
	}
	for i := e0; i < e1; i++ {
		def := int16(d.defs[i])
		if d.list {
			if d.reps[i] == 0 { // a new row
				d.listOffs = append(d.listOffs, int32(d.slots))
				appendValid(&d.listValid, d.rows, def >= d.listDef)
				d.rows++
			}
			if def < d.slotDef {
				continue
			}
		}
		appendValid(&d.valid, d.slots, def == d.maxDef)
		d.slots++
	}
}

// valueRuns sets the values of d.runs, where each run's present values lie
// among those of the page's n level entries, and returns how many the page
// holds.
func (d *columnDecoder) valueRuns(n int) int {
	if len(d.defs) == 0 || d.allDefined(d.defs[:n]) {
		for i := range d.runs {
			d.runs[i].v0, d.runs[i].v1 = d.runs[i].e0, d.runs[i].e1
		}
		return n
	}
	at, v := 0, 0 // v values before level entry at
	for i, r := range d.runs {
		v += d.count(at, r.e0)
		d.runs[i].v0 = v
		v += d.count(r.e0, r.e1)
		d.runs[i].v1 = v
		at = r.e1
	}
	return v + d.count(at, n)
}

// appendValid records whether item n of a sequence is valid in *flags,
// which stays nil as long as every item is.
func appendValid(flags *[]bool, n int, ok bool) {
	switch {
	case *flags != nil:
		*flags = append(*flags, ok)
	case !ok:
		*flags = make([]bool, n, 2*n+16)
		for i := range *flags {
			(*flags)[i] = true
		}
		*flags = append(*flags, false)
	}
}

// plain decodes the values of d.runs of a page of n PLAIN values.
func (d *columnDecoder) plain(data []byte, n int) error {
	if d.width > 0 {
		// Exactly: a page header is not under the page's CRC, and one
		// whose count of level entries is short leaves values over.
		if size := n * d.width; len(data) != size {
			return fmt.Errorf("page holds %d bytes of values, %d values of %d bytes expected", len(data), n, d.width)
		}
		for _, r := range d.runs {
			dst, err := d.fixed(r.v1 - r.v0)
			if err != nil {
				return err
			}
			copy(dst, data[r.v0*d.width:r.v1*d.width])
		}
		return nil
	}
	// Twice over the values: first to size the room for those kept, so
	// that a cell of tens of megabytes is copied once, into its place.
	var size int
	if err := d.plainRuns(data, func(val []byte) { size += len(val) }); err != nil {
		return err
	}
	d.reserveBinary(size)
	return d.plainRuns(data, d.appendBinary)
}

// plainRuns hands each value of d.runs of a page of PLAIN byte arrays to
// each, in order.
func (d *columnDecoder) plainRuns(data []byte, each func(val []byte)) error {
	v := 0
	for _, r := range d.runs {
		for ; v < r.v1; v++ {
			val, rest, err := plainBinary(data)
			if err != nil {
				return err
			}
			if v >= r.v0 {
				each(val)
			}
			data = rest
		}
	}
	return nil
}

// fixed returns the room for the next n fixed-width values, counted as
// decoded.
func (d *columnDecoder) fixed(n int) ([]byte, error) {
	at := d.nvalues * d.width
	if d.nvalues+n > d.maxValues {
		return nil, errors.New("more values than the column chunk declares")
	}
	if at+n*d.width > d.values.Len() {
		d.values.Resize(min(max(2*d.values.Len(), at+n*d.width), d.maxValues*d.width))
	}
	d.nvalues += n
	return d.values.Bytes()[at : at+n*d.width], nil
}

// indexed decodes the values of d.runs of a page of n dictionary-encoded
// values.
func (d *columnDecoder) indexed(data []byte, n int) error {
	if n == 0 || len(d.runs) == 0 {
		return nil
	}
	if len(data) < 1 {
		return errors.New("truncated dictionary indices")
	}
	d.idxBuf = growScratch(d.idxBuf, 4*n)
	d.idx = arrow.GetData[uint32](d.idxBuf)[:n]
	if err := hybrid(d.idx, data[1:], int(data[0])); err != nil {
		return err
	}
	if d.width == 0 {
		return d.indexedBinary()
	}
	for _, r := range d.runs {
		idx := d.idx[r.v0:r.v1]
		dst, err := d.fixed(len(idx))
		if err != nil {
			return err
		}
		switch d.width {
		case 4:
			err = lookup(arrow.GetData[uint32](dst), arrow.GetData[uint32](d.dict), idx)
		case 8:
			err = lookup(arrow.GetData[uint64](dst), arrow.GetData[uint64](d.dict), idx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lookup sets dst[k] = dict[idx[k]]; an index out of range is an error.
func lookup[T uint32 | uint64](dst, dict []T, idx []uint32) error {
	for k, i := range idx {
		if int(i) >= len(dict) {
			return indexError(i, len(dict))
		}
		dst[k] = dict[i]
	}
	return nil
}

func indexError(i uint32, size int) error {
	return fmt.Errorf("dictionary index %d out of range [0, %d)", i, size)
}

// indexedBinary takes the binary values of d.runs from the dictionary, by
// the page's indices, d.idx.
func (d *columnDecoder) indexedBinary() error {
	var n int
	for _, r := range d.runs {
		for _, i := range d.idx[r.v0:r.v1] {
			if int(i) >= len(d.dictBin) {
				return indexError(i, len(d.dictBin))
			}
			n += len(d.dictBin[i])
		}
	}
	d.reserveBinary(n)
	for _, r := range d.runs {
		for _, i := range d.idx[r.v0:r.v1] {
			d.appendBinary(d.dictBin[i])
		}
	}
	return nil
}

// reserveBinary makes room for n more bytes of binary values. The room
// grows by a quarter at least, so that many pages cost a few copies; a page
// that more than fills it gets room for itself and a quarter more, so that
// the values of the pages after it (a piece's small rows after its large
// one) do not copy it again. The buffer comes from the reader's allocator
// and becomes the column's: a cell of 60 MB is held once, not also in a
// buffer grown by doubling and in a copy of it at its final size.
func (d *columnDecoder) reserveBinary(n int) {
	need := d.bin.Len() + n
	if need <= d.bin.Cap() {
		return
	}
	d.bin.Reserve(max(need+need/4, d.bin.Cap()+d.bin.Cap()/4))
}

// appendBinary appends a value, with room reserved for it.
func (d *columnDecoder) appendBinary(v []byte) {
	at := d.bin.Len()
	d.bin.ResizeNoShrink(at + len(v))
	copy(d.bin.Bytes()[at:], v)
	d.binOffs = append(d.binOffs, int32(at+len(v)))
}

// finish builds the column's array, once pages of rows rows have been
// decoded.
func (d *columnDecoder) finish(mem memory.Allocator, rows int64) (arrow.Array, error) {
	if d.seen != rows {
		return nil, fmt.Errorf("column chunk holds %d rows, %d expected", d.seen, rows)
	}
	if d.keep != nil {
		rows = int64(len(d.keep))
	}
	outer, dt := d.outer, d.dt
	if !d.list && int64(d.slots) != rows {
		return nil, fmt.Errorf("column chunk holds %d values for %d rows", d.slots, rows)
	}
	if d.list && int64(d.rows) != rows {
		return nil, fmt.Errorf("column chunk holds %d lists for %d rows", d.rows, rows)
	}
	if d.binOffs == nil && d.nvalues != d.slots-nulls(d.valid) {
		return nil, fmt.Errorf("column chunk holds %d values for %d slots", d.nvalues, d.slots-nulls(d.valid))
	}
	elems := d.elements(mem, dt)
	defer elems.Release()
	if !d.list {
		return array.MakeFromData(elems), nil
	}
	d.listOffs = append(d.listOffs, int32(d.slots))
	offsets := memory.NewResizableBuffer(mem)
	offsets.Resize(len(d.listOffs) * 4)
	copy(arrow.GetData[int32](offsets.Bytes()), d.listOffs)
	defer offsets.Release()
	validity, nullCount := bitmap(mem, d.listValid, d.rows)
	if validity != nil {
		defer validity.Release()
	}
	data := array.NewData(outer, d.rows, []*memory.Buffer{validity, offsets}, []arrow.ArrayData{elems}, nullCount, 0)
	defer data.Release()
	return array.MakeFromData(data), nil
}

// elements builds the slots' array: present values spread to their slots.
func (d *columnDecoder) elements(mem memory.Allocator, dt arrow.DataType) arrow.ArrayData {
	validity, nullCount := bitmap(mem, d.valid, d.slots)
	if validity != nil {
		defer validity.Release()
	}
	if d.binOffs == nil {
		values := d.values
		values.Resize(d.slots * d.width) // slots ≤ level entries
		if nullCount > 0 {               // spread values to their slots, from the back; nulls are zero
			b := values.Bytes()
			v := d.nvalues
			for s := d.slots - 1; s >= 0; s-- {
				if v > 0 && d.valid[s] {
					v--
					copy(b[s*d.width:(s+1)*d.width], b[v*d.width:(v+1)*d.width])
				} else {
					clear(b[s*d.width : (s+1)*d.width])
				}
			}
		}
		return array.NewData(dt, d.slots, []*memory.Buffer{validity, values}, nil, nullCount, 0)
	}
	var offsets *memory.Buffer
	switch dt.ID() {
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		offsets = slotOffsets[int64](mem, d, arrow.Int64SizeBytes)
	default:
		offsets = slotOffsets[int32](mem, d, arrow.Int32SizeBytes)
	}
	defer offsets.Release()
	data := d.bin
	d.bin = nil
	if data.Len() > 0 {
		data.Resize(data.Len()) // gives back the room not filled
	}
	defer data.Release()
	return array.NewData(dt, d.slots, []*memory.Buffer{validity, offsets, data}, nil, nullCount, 0)
}

// slotOffsets builds the offsets buffer of a binary column's slots from the
// offsets of its present values: a null slot is empty.
func slotOffsets[T int32 | int64](mem memory.Allocator, d *columnDecoder, size int) *memory.Buffer {
	offsets := memory.NewResizableBuffer(mem)
	offsets.Resize((d.slots + 1) * size)
	offs := arrow.GetData[T](offsets.Bytes())
	v := 0
	for s := range d.slots {
		offs[s] = T(d.binOffs[v])
		if d.valid == nil || d.valid[s] {
			v++
		}
	}
	offs[d.slots] = T(d.binOffs[v])
	return offsets
}

// bitmap packs the flags of n items (missing ones are set) into a validity
// bitmap, and counts the unset ones; it returns nil when none is unset.
func bitmap(mem memory.Allocator, flags []bool, n int) (*memory.Buffer, int) {
	unset := nulls(flags)
	if unset == 0 {
		return nil, 0
	}
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(int(bitutil.BytesForBits(int64(n))))
	bits := buf.Bytes()
	for i := range n {
		if i >= len(flags) || flags[i] {
			bitutil.SetBit(bits, i)
		}
	}
	return buf, unset
}

func nulls(flags []bool) int {
	n := 0
	for _, f := range flags {
		if !f {
			n++
		}
	}
	return n
}
