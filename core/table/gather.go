package table

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// A batch is assembled from rows of several decoded row groups. Gathering
// them with compute.Take per group, concatenating the pieces and reordering
// them with a second Take copies every value three times and grows its
// buffers as it goes. gather instead copies each value once, in output order,
// into buffers allocated at their final size: runs of consecutive rows of one
// source become one copy, so a sequential read is a few memmoves, and list
// values are copied as whole ranges. It supports the layouts training data
// uses (fixed-width values, booleans, binary and string, lists and structs of
// them); Read falls back to Take for the rest.

// span is n consecutive rows of source src, starting at row off.
type span struct {
	src    int
	off, n int64
}

// appendSpan adds rows [off, off+n) of src to spans, extending the last span
// when the rows continue it.
func appendSpan(spans []span, src int, off, n int64) []span {
	if k := len(spans) - 1; k >= 0 && spans[k].src == src && spans[k].off+spans[k].n == off {
		spans[k].n += n
		return spans
	}
	return append(spans, span{src, off, n})
}

// gatherable reports whether gather supports values of type dt.
func gatherable(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case *arrow.BooleanType, *arrow.BinaryType, *arrow.StringType, *arrow.LargeBinaryType, *arrow.LargeStringType:
		return true
	case *arrow.ListType:
		return gatherable(t.Elem())
	case *arrow.LargeListType:
		return gatherable(t.Elem())
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if !gatherable(f.Type) {
				return false
			}
		}
		return true
	case *arrow.DictionaryType, arrow.ExtensionType:
		return false
	case arrow.FixedWidthDataType:
		l := dt.Layout()
		return len(l.Buffers) == 2 && l.Buffers[1].Kind == arrow.KindFixedWidth && t.BitWidth()%8 == 0
	}
	return false
}

// gather returns the rows spans name, in order, as one array of type dt.
// Every source has type dt; the caller has checked gatherable(dt).
func gather(mem memory.Allocator, dt arrow.DataType, srcs []arrow.ArrayData, spans []span) (arrow.ArrayData, error) {
	var n int64
	for _, s := range spans {
		n += s.n
	}
	validity, nulls := gatherValidity(mem, srcs, spans, n)
	buffers := []*memory.Buffer{validity}
	var children []arrow.ArrayData
	defer func() {
		for _, b := range buffers {
			if b != nil {
				b.Release()
			}
		}
		for _, c := range children {
			c.Release()
		}
	}()
	var err error
	switch t := dt.(type) {
	case *arrow.BooleanType:
		buffers = append(buffers, gatherBits(mem, srcs, spans, n, 1))
	case *arrow.BinaryType, *arrow.StringType, *arrow.LargeBinaryType, *arrow.LargeStringType:
		var offsets *memory.Buffer
		var ranges []span
		if offsets, ranges, err = gatherOffsets(mem, dt, srcs, spans, n); err == nil {
			buffers = append(buffers, offsets, gatherBytes(mem, srcs, ranges))
		}
	case *arrow.ListType, *arrow.LargeListType:
		var offsets *memory.Buffer
		var ranges []span
		var child arrow.ArrayData
		if offsets, ranges, err = gatherOffsets(mem, dt, srcs, spans, n); err == nil {
			buffers = append(buffers, offsets)
			child, err = gather(mem, t.(arrow.ListLikeType).Elem(), childData(srcs, 0), ranges)
		}
		if err == nil {
			children = append(children, child)
		}
	case *arrow.StructType:
		// A struct's offset applies to its children, which are not sliced.
		shifted := make([]span, len(spans))
		for i, s := range spans {
			shifted[i] = span{s.src, s.off + int64(srcs[s.src].Offset()), s.n}
		}
		for i, f := range t.Fields() {
			var child arrow.ArrayData
			if child, err = gather(mem, f.Type, childData(srcs, i), shifted); err != nil {
				break
			}
			children = append(children, child)
		}
	case arrow.FixedWidthDataType:
		buffers = append(buffers, gatherBits(mem, srcs, spans, n, t.BitWidth()))
	default:
		err = fmt.Errorf("gather: unsupported type %s", dt)
	}
	if err != nil {
		return nil, err
	}
	return array.NewData(dt, int(n), buffers, children, nulls, 0), nil
}

// childData returns child i of every source.
func childData(srcs []arrow.ArrayData, i int) []arrow.ArrayData {
	out := make([]arrow.ArrayData, len(srcs))
	for j, s := range srcs {
		out[j] = s.Children()[i]
	}
	return out
}

// newBuffer allocates a buffer of n bytes.
func newBuffer(mem memory.Allocator, n int64) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(int(n))
	return b
}

// unzeroedAllocator is an allocator that can hand out memory without zeroing
// it first (cmem.Allocator).
type unzeroedAllocator interface {
	AllocateUnzeroed(n int) []byte
}

// newFilled allocates a buffer of n bytes that the caller fills before
// anything reads it: not zeroed first, where mem can. Its capacity is
// rounded up to 64 bytes, as newBuffer's, so that it shrinks in place.
func newFilled(mem memory.Allocator, n int64) *memory.Buffer {
	u, ok := mem.(unzeroedAllocator)
	if !ok || n <= 0 {
		return newBuffer(mem, n)
	}
	b := memory.NewBufferWithAllocator(u.AllocateUnzeroed(int(n+63)&^63), mem)
	b.Resize(int(n))
	return b
}

// gatherValidity returns the validity bitmap of the gathered rows and their
// null count, or nil and 0 when no gathered row is null.
func gatherValidity(mem memory.Allocator, srcs []arrow.ArrayData, spans []span, n int64) (*memory.Buffer, int) {
	var withNulls [][]byte // the bitmap of each source that may have nulls
	for i, src := range srcs {
		if mayHaveNulls(src) {
			if withNulls == nil {
				withNulls = make([][]byte, len(srcs))
			}
			withNulls[i] = src.Buffers()[0].Bytes()
		}
	}
	if withNulls == nil {
		return nil, 0
	}
	out := newBuffer(mem, bitutil.BytesForBits(n))
	bits := out.Bytes()
	var at int64
	for _, s := range spans {
		if b := withNulls[s.src]; b != nil {
			copyBits(bits, at, b, int64(srcs[s.src].Offset())+s.off, s.n)
		} else {
			bitutil.SetBitsTo(bits, at, s.n, true)
		}
		at += s.n
	}
	return out, int(n) - bitutil.CountSetBits(bits, 0, int(n))
}

// mayHaveNulls reports whether d has a validity bitmap and may have nulls
// (its null count is positive or not known yet).
func mayHaveNulls(d arrow.ArrayData) bool {
	return d.NullN() != 0 && d.Buffers()[0] != nil
}

// gatherBits copies the values of a fixed-width layout, width bits each
// (1 for booleans, else a multiple of 8), from buffer 1 of the sources.
func gatherBits(mem memory.Allocator, srcs []arrow.ArrayData, spans []span, n int64, width int) *memory.Buffer {
	if width == 1 {
		out := newBuffer(mem, bitutil.BytesForBits(n))
		var at int64
		for _, s := range spans {
			src := srcs[s.src]
			copyBits(out.Bytes(), at, src.Buffers()[1].Bytes(), int64(src.Offset())+s.off, s.n)
			at += s.n
		}
		return out
	}
	out := newFilled(mem, n*int64(width/8))
	switch width {
	case 8:
		gatherFixed[uint8](out.Bytes(), srcs, spans)
	case 16:
		gatherFixed[uint16](out.Bytes(), srcs, spans)
	case 32:
		gatherFixed[uint32](out.Bytes(), srcs, spans)
	case 64:
		gatherFixed[uint64](out.Bytes(), srcs, spans)
	default:
		w := int64(width / 8)
		dst := out.Bytes()
		for _, s := range spans {
			src := srcs[s.src]
			from := (int64(src.Offset()) + s.off) * w
			dst = dst[copy(dst, src.Buffers()[1].Bytes()[from:from+s.n*w]):]
		}
	}
	return out
}

// gatherFixed copies the values spans name into dst, values of type T. A
// shuffled batch is mostly single rows, each a load from memory that is not
// in the cache: assigning them directly, rather than calling copy, lets the
// processor have many of those loads in flight at once.
func gatherFixed[T uint8 | uint16 | uint32 | uint64](out []byte, srcs []arrow.ArrayData, spans []span) {
	vals := make([][]T, len(srcs))
	for i, src := range srcs {
		vals[i] = arrow.GetData[T](src.Buffers()[1].Bytes())[src.Offset():]
	}
	dst := arrow.GetData[T](out)
	at := int64(0)
	for _, s := range spans {
		if s.n == 1 {
			dst[at] = vals[s.src][s.off]
		} else {
			copy(dst[at:at+s.n], vals[s.src][s.off:s.off+s.n])
		}
		at += s.n
	}
}

// copyBits copies n bits of src from bit from to dst at bit at. Short runs,
// all of a shuffled batch, are copied bit by bit: bitutil.CopyBitmap sets up
// word readers and writers that cost more than the copy itself.
func copyBits(dst []byte, at int64, src []byte, from, n int64) {
	if n > 64 {
		bitutil.CopyBitmap(src, int(from), int(n), dst, int(at))
		return
	}
	for i := range n {
		bitutil.SetBitTo(dst, int(at+i), bitutil.BitIsSet(src, int(from+i)))
	}
}

// gatherOffsets builds the offsets of the gathered rows of a binary or list
// layout, and returns the ranges of the sources' values (bytes or child rows)
// they refer to, in order.
func gatherOffsets(mem memory.Allocator, dt arrow.DataType, srcs []arrow.ArrayData, spans []span, n int64) (*memory.Buffer, []span, error) {
	if dt.Layout().Buffers[1].ByteWidth == 8 {
		return gatherOffsetsOf[int64](mem, srcs, spans, n)
	}
	return gatherOffsetsOf[int32](mem, srcs, spans, n)
}

// gatherOffsetsOf is gatherOffsets for offsets of type O. It fails when the
// values outgrow O.
func gatherOffsetsOf[O int32 | int64](mem memory.Allocator, srcs []arrow.ArrayData, spans []span, n int64) (*memory.Buffer, []span, error) {
	out := newFilled(mem, (n+1)*int64(unsafe.Sizeof(O(0))))
	dst := arrow.GetData[O](out.Bytes())
	var ranges []span
	var total int64
	at := 0
	for _, s := range spans {
		src := srcs[s.src]
		offs := arrow.GetData[O](src.Buffers()[1].Bytes())[src.Offset()+int(s.off):]
		start := int64(offs[0])
		for i := range s.n + 1 {
			dst[at+int(i)] = O(total + int64(offs[i]) - start)
		}
		at += int(s.n)
		size := int64(offs[s.n]) - start
		total += size
		if size > 0 {
			ranges = appendSpan(ranges, s.src, start, size)
		}
	}
	if unsafe.Sizeof(O(0)) == 4 && total > math.MaxInt32 {
		out.Release()
		return nil, nil, fmt.Errorf("gather: %d bytes of values overflow 32-bit offsets; use a smaller batch or large types", total)
	}
	return out, ranges, nil
}

// gatherBytes copies byte ranges of the sources' value buffers (buffer 2 of
// a binary layout). Offsets index values directly, so the sources' own array
// offsets do not apply.
func gatherBytes(mem memory.Allocator, srcs []arrow.ArrayData, ranges []span) *memory.Buffer {
	var n int64
	for _, r := range ranges {
		n += r.n
	}
	out := newFilled(mem, n)
	dst := out.Bytes()
	for _, r := range ranges {
		dst = dst[copy(dst, srcs[r.src].Buffers()[2].Bytes()[r.off:r.off+r.n]):]
	}
	return out
}
