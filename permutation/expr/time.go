package expr

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Timestamps and dates are evaluated as int64 nanoseconds since
// 1970-01-01 00:00:00 UTC: a timestamp column's values are instants in UTC
// whatever its unit and time zone (Arrow stores them so), a column without
// a time zone is read as UTC, and a date is its midnight. Nanoseconds cover
// the years 1678 to 2261; a value outside them makes evaluation fail rather
// than compare wrongly.

// nanosPer is the number of nanoseconds in one unit of each column type.
func nanosPer(dt arrow.DataType) int64 {
	switch dt := dt.(type) {
	case *arrow.TimestampType:
		return int64(dt.Unit.Multiplier())
	case *arrow.Date32Type:
		return 86400 * int64(time.Second)
	}
	return int64(time.Millisecond) // date64
}

// mulNanos multiplies v units of per nanoseconds, reporting overflow.
func mulNanos(v, per int64) (int64, bool) {
	if per == 1 {
		return v, true
	}
	if v > math.MaxInt64/per || v < math.MinInt64/per {
		return 0, false
	}
	return v * per, true
}

// timeNanos converts a timestamp, date32 or date64 array to int64
// nanoseconds. The caller releases the result.
func timeNanos(ev *evaluator, name string, a arrow.Array) (arrow.Array, error) {
	per := nanosPer(a.DataType())
	var value func(i int) int64
	switch a := a.(type) {
	case *array.Timestamp:
		value = func(i int) int64 { return int64(a.Value(i)) }
	case *array.Date32:
		value = func(i int) int64 { return int64(a.Value(i)) }
	case *array.Date64:
		value = func(i int) int64 { return int64(a.Value(i)) }
	default:
		return nil, fmt.Errorf("column %s: %s is not a timestamp or date", name, a.DataType())
	}
	w := newNumWriter[int64](ev, a.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if a.IsNull(i) {
			w.null(i)
			continue
		}
		ns, ok := mulNanos(value(i), per)
		if !ok {
			w.release()
			return nil, fmt.Errorf("column %s: the value %d (%s) is outside the years 1678 to 2261 that comparisons cover",
				name, value(i), a.DataType())
		}
		w.set(i, ns)
	}
	return w.finish(), nil
}

// timeLayouts are the forms a timestamp literal may take: a date, or a date
// and a time of day with up to nine fractional digits, separated by a space
// or T, optionally followed by Z or an offset from UTC.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02",
}

// parseTime reads the text of a TIMESTAMP or DATE literal (or of a string
// compared with a timestamp or date) as nanoseconds since the epoch, UTC
// unless the text carries an offset.
func parseTime(text string, date bool) (int64, error) {
	layouts := timeLayouts
	form := "'YYYY-MM-DD[ HH:MM:SS[.fffffffff]][Z|+HH:MM]'"
	if date {
		layouts, form = timeLayouts[len(timeLayouts)-1:], "'YYYY-MM-DD'"
	}
	for _, l := range layouts {
		t, err := time.Parse(l, strings.TrimSpace(text))
		if err != nil {
			continue
		}
		if t.Year() < 1678 || t.Year() > 2261 {
			return 0, fmt.Errorf("%q is outside the years 1678 to 2261 that timestamps cover", text)
		}
		return t.UnixNano(), nil
	}
	what := "timestamp"
	if date {
		what = "date"
	}
	return 0, fmt.Errorf("%q is not a %s: write %s", text, what, form)
}

// intervalUnits are the units of INTERVAL n unit, in nanoseconds: MySQL's
// units of fixed length.
var intervalUnits = map[string]int64{
	"MICROSECOND": int64(time.Microsecond),
	"SECOND":      int64(time.Second),
	"MINUTE":      int64(time.Minute),
	"HOUR":        int64(time.Hour),
	"DAY":         24 * int64(time.Hour),
	"WEEK":        7 * 24 * int64(time.Hour),
}

// calendarUnits have no fixed length: adding one is calendar arithmetic,
// which expressions do not do.
var calendarUnits = map[string]bool{"MONTH": true, "QUARTER": true, "YEAR": true, "YEAR_MONTH": true}

// nowFunctions read the clock. A permutation is a persisted, reproducible
// function of its spec and the table, so its filter cannot depend on when
// it is built: these are refused, and the error says to write the instant.
var nowFunctions = map[string]bool{
	"now": true, "current_timestamp": true, "current_date": true, "current_time": true,
	"curdate": true, "curtime": true, "sysdate": true, "localtime": true, "localtimestamp": true,
	"utc_timestamp": true, "utc_date": true, "utc_time": true,
}

const nowRefused = "%s reads the clock, and a permutation must be the same whenever it is built: " +
	"write the instant as TIMESTAMP 'YYYY-MM-DD HH:MM:SS' (UTC)"

// shift compiles x + INTERVAL n unit (or x - INTERVAL n unit when sub).
func (c *compiler) shift(e sexpr, xe sexpr, iv *intervalExpr, sub bool) (node, error) {
	per, ok := intervalUnits[iv.unit]
	switch {
	case calendarUnits[iv.unit]:
		return nil, c.errf(iv, "INTERVAL n %s is not supported: months and years have no fixed length; "+
			"write the bound as TIMESTAMP '...', or use DAY or WEEK", iv.unit)
	case !ok:
		return nil, c.errf(iv, "INTERVAL n %s is not supported; the units are MICROSECOND, SECOND, MINUTE, HOUR, DAY and WEEK", iv.unit)
	}
	n, err := c.compile(iv.n)
	if err != nil {
		return nil, err
	}
	lit, isLit := n.(*literal)
	if !isLit || lit.k != kInt || lit.null {
		return nil, c.errf(iv, "INTERVAL needs an integer literal as its number, unquoted: INTERVAL 1 HOUR")
	}
	d, ok := mulNanos(lit.v.(int64), per)
	if !ok {
		return nil, c.errf(iv, "the interval is longer than timestamps can hold")
	}
	x, err := c.compile(xe)
	if err != nil {
		return nil, err
	}
	switch x.kind() {
	case kNull:
		return &literal{k: kTime, null: true}, nil
	case kTime:
	default:
		return nil, c.errf(e, "type mismatch: an INTERVAL is added to a timestamp or date, not a %s", x.kind())
	}
	if sub {
		d = -d // d > MinInt64: no multiple of a unit is -2⁶³
	}
	if lit, ok := x.(*literal); ok && lit.null {
		return lit, nil
	} else if ok {
		// A constant is shifted now, so that pruning sees the bound.
		t := lit.v.(int64)
		if (d > 0 && t > math.MaxInt64-d) || (d < 0 && t < math.MinInt64-d) {
			return nil, c.errf(e, "the result is outside the years 1678 to 2261 that timestamps cover")
		}
		return &literal{k: kTime, v: t + d}, nil
	}
	o := opAdd
	return &arith{op: o, k: kTime, l: x, r: &literal{k: kInt, v: d}}, nil
}

// timeLiterals reads the string literals among nodes as timestamps when
// any of nodes is a timestamp or date, as MySQL does.
func (c *compiler) timeLiterals(e sexpr, nodes []node) error {
	if !hasKind(nodes, kTime) {
		return nil
	}
	for i, n := range nodes {
		lit, ok := n.(*literal)
		if !ok || lit.k != kString || lit.null {
			continue
		}
		v, err := parseTime(lit.v.(string), false)
		if err != nil {
			return c.errf(e, "%v", err)
		}
		nodes[i] = &literal{k: kTime, v: v}
	}
	return nil
}

// hasKind reports whether any of nodes is of kind k.
func hasKind(nodes []node, k kind) bool {
	for _, n := range nodes {
		if n.kind() == k {
			return true
		}
	}
	return false
}
