package expr

import (
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The kernels compute lacks (LIKE, division with NULL for a zero divisor,
// remainder, lengths, IS TRUE, coalesce) write their output with these
// writers, straight into buffers from the evaluation's allocator.

// newBitmap returns a zeroed buffer of n bits.
func newBitmap(ev *evaluator, n int) *memory.Buffer {
	buf := memory.NewResizableBuffer(ev.mem)
	buf.Resize(int(bitutil.BytesForBits(int64(n))))
	clear(buf.Bytes())
	return buf
}

// boolWriter fills a boolean array of ev.n values.
type boolWriter struct {
	n            int
	vals, valid  *memory.Buffer
	vbits, nbits []byte
}

func newBoolWriter(ev *evaluator, nullable bool) *boolWriter {
	w := &boolWriter{n: ev.n, vals: newBitmap(ev, ev.n)}
	w.vbits = w.vals.Bytes()
	if nullable {
		w.valid = newBitmap(ev, ev.n)
		w.nbits = w.valid.Bytes()
		bitutil.SetBitsTo(w.nbits, 0, int64(ev.n), true)
	}
	return w
}

func (w *boolWriter) set(i int, v bool) {
	if v {
		w.vbits[i>>3] |= 1 << (i & 7)
	}
}

// null marks row i null; the writer must have been made nullable.
func (w *boolWriter) null(i int) { w.nbits[i>>3] &^= 1 << (i & 7) }

func (w *boolWriter) finish() arrow.Array {
	data := array.NewData(arrow.FixedWidthTypes.Boolean, w.n,
		[]*memory.Buffer{w.valid, w.vals}, nil, nullCount(w.valid), 0)
	w.vals.Release()
	if w.valid != nil {
		w.valid.Release()
	}
	defer data.Release()
	return array.MakeFromData(data)
}

// nullCount is the null count to declare for a validity bitmap: none
// without one, else to be counted.
func nullCount(valid *memory.Buffer) int {
	if valid == nil {
		return 0
	}
	return array.UnknownNullCount
}

// numWriter fills an int64 or float64 array of ev.n values.
type numWriter[T int64 | float64] struct {
	n           int
	vals, valid *memory.Buffer
	v           []T
	nbits       []byte
}

func newNumWriter[T int64 | float64](ev *evaluator, nullable bool) *numWriter[T] {
	w := &numWriter[T]{n: ev.n, vals: memory.NewResizableBuffer(ev.mem)}
	w.vals.Resize(ev.n * 8)
	if ev.n > 0 {
		w.v = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(w.vals.Bytes()))), ev.n)
	}
	clear(w.v)
	if nullable {
		w.valid = newBitmap(ev, ev.n)
		w.nbits = w.valid.Bytes()
		bitutil.SetBitsTo(w.nbits, 0, int64(ev.n), true)
	}
	return w
}

func (w *numWriter[T]) set(i int, v T) { w.v[i] = v }
func (w *numWriter[T]) null(i int)     { w.nbits[i>>3] &^= 1 << (i & 7) }

func (w *numWriter[T]) release() {
	w.vals.Release()
	if w.valid != nil {
		w.valid.Release()
	}
}

func (w *numWriter[T]) finish() arrow.Array {
	var dt arrow.DataType = arrow.PrimitiveTypes.Int64
	var zero T
	if _, ok := any(zero).(float64); ok {
		dt = arrow.PrimitiveTypes.Float64
	}
	data := array.NewData(dt, w.n, []*memory.Buffer{w.valid, w.vals}, nil, nullCount(w.valid), 0)
	w.release()
	defer data.Release()
	return array.MakeFromData(data)
}

// likeMatcher matches SQL LIKE patterns: % is any run of characters, _ is
// one character, and the escape character makes the next one literal.
// Matching is case-sensitive and byte-exact (a binary collation); a byte
// that is not valid UTF-8 counts as one character.
type likeMatcher struct {
	shape int // one of the like* constants
	lit   string
	toks  []likeTok
}

type likeTok struct {
	wild byte // '%', '_' or 0 for a literal
	lit  string
}

const (
	likeExact = iota
	likePrefix
	likeSuffix
	likeContains
	likeGeneral
)

// compileLike compiles a LIKE pattern. Patterns of the common shapes 'abc',
// 'abc%', '%abc' and '%abc%' get a direct string test.
func compileLike(pattern string, escape rune) *likeMatcher {
	var toks []likeTok
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, likeTok{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		switch {
		case escape != 0 && r == escape && size > 0 && i+size < len(pattern):
			i += size
			_, size = utf8.DecodeRuneInString(pattern[i:])
			lit.WriteString(pattern[i : i+size])
		case r == '%' || r == '_':
			flush()
			if r == '%' && len(toks) > 0 && toks[len(toks)-1].wild == '%' {
				break
			}
			toks = append(toks, likeTok{wild: byte(r)})
		default:
			lit.WriteString(pattern[i : i+size])
		}
		i += size
	}
	flush()
	pct := func(t likeTok) bool { return t.wild == '%' }
	isLit := func(t likeTok) bool { return t.wild == 0 }
	switch {
	case len(toks) == 0:
		return &likeMatcher{shape: likeExact}
	case len(toks) == 1 && isLit(toks[0]):
		return &likeMatcher{shape: likeExact, lit: toks[0].lit}
	case len(toks) == 1 && pct(toks[0]):
		return &likeMatcher{shape: likePrefix}
	case len(toks) == 2 && isLit(toks[0]) && pct(toks[1]):
		return &likeMatcher{shape: likePrefix, lit: toks[0].lit}
	case len(toks) == 2 && pct(toks[0]) && isLit(toks[1]):
		return &likeMatcher{shape: likeSuffix, lit: toks[1].lit}
	case len(toks) == 3 && pct(toks[0]) && isLit(toks[1]) && pct(toks[2]):
		return &likeMatcher{shape: likeContains, lit: toks[1].lit}
	}
	return &likeMatcher{shape: likeGeneral, toks: toks}
}

func (m *likeMatcher) match(s string) bool {
	switch m.shape {
	case likeExact:
		return s == m.lit
	case likePrefix:
		return strings.HasPrefix(s, m.lit)
	case likeSuffix:
		return strings.HasSuffix(s, m.lit)
	case likeContains:
		return strings.Contains(s, m.lit)
	}
	// Wildcard matching that backtracks only to the last %: an earlier %
	// never needs to take more, so this is complete, in O(len(s)·len(toks)).
	toks := m.toks
	ti, si := 0, 0
	star, starSi := -1, 0
	for si < len(s) || ti < len(toks) {
		if ti < len(toks) {
			switch t := toks[ti]; {
			case t.wild == '%':
				star, starSi = ti, si
				ti++
				continue
			case t.wild == '_' && si < len(s):
				_, size := utf8.DecodeRuneInString(s[si:])
				si += size
				ti++
				continue
			case t.wild == 0 && strings.HasPrefix(s[si:], t.lit):
				si += len(t.lit)
				ti++
				continue
			}
		}
		if star < 0 || starSi >= len(s) {
			return false
		}
		_, size := utf8.DecodeRuneInString(s[starSi:])
		starSi += size
		ti, si = star+1, starSi
	}
	return true
}
