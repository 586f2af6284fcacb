package expr_test

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/permutation/expr"
)

// timeSchema has a timestamp of every unit (one with a time zone), both
// dates and decimals of two scales.
var timeSchema = arrow.NewSchema([]arrow.Field{
	{Name: "t_s", Type: &arrow.TimestampType{Unit: arrow.Second}, Nullable: true},
	{Name: "t_ms", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/New_York"}, Nullable: true},
	{Name: "t_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "t_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "day64", Type: arrow.FixedWidthTypes.Date64, Nullable: true},
	{Name: "price", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
	{Name: "big", Type: &arrow.Decimal128Type{Precision: 38, Scale: 0}, Nullable: true},
	{Name: "huge", Type: &arrow.Decimal256Type{Precision: 60, Scale: 10}, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// The rows are instants around 2026-11-30 (1796083200 s since the epoch is
// 2026-12-01 00:00:00 UTC): every timestamp column of a row holds the same
// instant, in its unit.
const timeRows = `[
{"t_s": 1796083200, "t_ms": 1796083200000, "t_us": 1796083200000000, "t_ns": 1796083200000000000,
 "day": 20788, "day64": 1796083200000, "price": "1.25", "big": "99999999999999999999999999999999999999",
 "huge": "12345678901234567890123456789012345678901234567890.0000000001", "s": "x"},
{"t_s": 1796079600, "t_ms": 1796079600500, "t_us": 1796079600500001, "t_ns": 1796079600500001001,
 "day": 20787, "day64": 1795996800000, "price": "-0.01", "big": "-5", "huge": "-0.5", "s": "y"},
{"t_s": null, "t_ms": null, "t_us": null, "t_ns": null,
 "day": null, "day64": null, "price": null, "big": null, "huge": null, "s": null},
{"t_s": 0, "t_ms": 0, "t_us": 0, "t_ns": 0,
 "day": 0, "day64": 0, "price": "12345678.90", "big": "0", "huge": "0", "s": "1970-01-01"}
]`

func timeRecord(t testing.TB, mem memory.Allocator) arrow.RecordBatch {
	rec, _, err := array.RecordFromJSON(mem, timeSchema, strings.NewReader(timeRows))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestTimeAndDecimal evaluates filters on timestamps, dates and decimals;
// want is the rows where the filter is TRUE.
func TestTimeAndDecimal(t *testing.T) {
	mem := checkedMem(t)
	rec := timeRecord(t, mem)
	defer rec.Release()
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"t_s >= TIMESTAMP '2026-12-01 00:00:00'", []int{0}},
		{"t_ms >= TIMESTAMP '2026-12-01 00:00:00'", []int{0}},
		{"t_us >= TIMESTAMP '2026-12-01'", []int{0}},
		{"t_ns > TIMESTAMP '2026-11-30 23:00:00.500001'", []int{0, 1}}, // 1 ns past
		{"t_us > TIMESTAMP '2026-11-30 23:00:00.500001'", []int{0}},
		{"t_ns = TIMESTAMP '2026-11-30 23:00:00.500001001'", []int{1}},
		{"t_s = TIMESTAMP '2026-12-01 01:00:00+01:00'", []int{0}}, // an offset
		{"t_s = TIMESTAMP '2026-11-30T23:00:00Z'", []int{1}},
		{"t_s > '2026-11-30 12:00:00'", []int{0, 1}}, // a string read as a timestamp
		{"'1970-01-01' = t_ms", []int{3}},
		{"t_s BETWEEN '2026-11-30' AND '2026-12-01'", []int{0, 1}},
		{"t_s NOT BETWEEN '2026-11-30' AND '2026-12-01'", []int{3}},
		{"t_us IN ('1970-01-01', TIMESTAMP '2026-12-01 00:00:00')", []int{0, 3}},
		{"t_us NOT IN ('1970-01-01', NULL)", nil},
		{"t_ns IS NULL", []int{2}},
		{"t_s = t_ns", []int{0, 3}}, // a second column truncates the instant
		{"t_ms = t_ns", []int{0, 3}},
		{"t_us < t_ns", []int{1}},
		{"t_s >= TIMESTAMP '2026-12-01 02:00:00' - INTERVAL 2 HOUR", []int{0}},
		{"t_s + INTERVAL 1 DAY > TIMESTAMP '2026-12-01 12:00:00'", []int{0, 1}},
		{"INTERVAL 30 MINUTE + t_s > TIMESTAMP '2026-11-30 23:45:00'", []int{0}},
		{"t_us - INTERVAL 1 WEEK < DATE '2026-11-24'", []int{1, 3}},
		{"t_us - INTERVAL 500001 MICROSECOND = '2026-11-30 23:00:00'", []int{1}},
		{"t_s - INTERVAL -60 SECOND = '2026-12-01 00:01:00'", []int{0}},
		{"day = DATE '2026-12-01'", []int{0}},
		{"day = '2026-11-30'", []int{1}},
		{"day64 = day", []int{0, 1, 3}},
		{"day < t_s", []int{1}}, // a date is its midnight
		{"day >= DATE '2026-11-30' - INTERVAL 1 DAY", []int{0, 1}},
		{"coalesce(t_s, TIMESTAMP '2000-01-01') < '2001-01-01'", []int{2, 3}},
		{"NULL + INTERVAL 1 DAY + INTERVAL 1 DAY IS NULL", []int{0, 1, 2, 3}},
		{"coalesce(day, '1999-12-31') = DATE '1999-12-31'", []int{2}},
		{"price > 1.25", []int{3}},
		{"price >= 1.25", []int{0, 3}},
		{"price = 1.25", []int{0}},
		{"price = 1.250000", []int{0}},
		{"price = 1.251", nil}, // more digits than the scale: equals nothing
		{"price != 1.251", []int{0, 1, 3}},
		{"price > 1.249", []int{0, 3}},
		{"price < 1.251", []int{0, 1}},
		{"price <= 1.249", []int{1}},
		{"price >= 1.2500001", []int{3}},
		{"price < -0.005", []int{1}},
		{"price > -0.015", []int{0, 1, 3}},
		{"1.25 < price", []int{3}},
		{"price > 1", []int{0, 3}},
		{"price = 12345678.9", []int{3}},
		{"price > 1e7", []int{3}},
		{"price < 2.5e-2", []int{1}},
		{"price BETWEEN 0 AND 1.25", []int{0}},
		{"price IN (1.25, -0.01, 7.001)", []int{0, 1}},
		{"price NOT IN (1.25, 7.001)", []int{1, 3}},
		{"price NOT IN (1.25, NULL)", nil},
		{"price IS NOT NULL", []int{0, 1, 3}},
		{"price = NULL", nil},
		{"big > 99999999999999999999999999999999999998.0", []int{0}},
		{"big < 999999999999999999999999999999999999999999.0", []int{0, 1, 3}}, // past decimal128
		{"big > -999999999999999999999999999999999999999999.5", []int{0, 1, 3}},
		{"big = -5.0", []int{1}},
		{"huge > 12345678901234567890123456789012345678901234567890.0", []int{0}},
		{"huge = 12345678901234567890123456789012345678901234567890.0000000001", []int{0}},
		{"huge < -0.49999999999", []int{1}},
		{"huge <= -0.5000000000000000001", nil},
		{"huge IN (0, -0.50, 7)", []int{1, 3}},
		{"huge BETWEEN -1 AND 1e-10", []int{1, 3}},
		{"coalesce(price, 0) > 1", []int{0, 3}},
		{"coalesce(price, 1.3) > 1.299", []int{2, 3}},
		{"coalesce(NULL, price, NULL, -0.01) = -0.01", []int{1, 2}},
		{"coalesce(huge, 0) IN (0, -0.5)", []int{1, 2, 3}},
		{"coalesce(price, NULL) IS NULL", []int{2}},
	} {
		e, err := expr.Parse(tc.text, timeSchema)
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		mask, err := e.Mask(context.Background(), rec, mem)
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		var got []int
		for i, m := range mask {
			if m {
				got = append(got, i)
			}
		}
		if !equalInts(got, tc.want) {
			t.Errorf("%s: rows %v, want %v", tc.text, got, tc.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTimeAndDecimalErrors: what is refused names the construct in SQL.
func TestTimeAndDecimalErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"t_s > now()", "now() reads the clock"},
		{"t_s > CURRENT_TIMESTAMP", "CURRENT_TIMESTAMP reads the clock"},
		{"t_s > current_timestamp() - INTERVAL 2 HOUR", "current_timestamp() reads the clock"},
		{"day = curdate()", "curdate() reads the clock"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL 1 MONTH", "INTERVAL n MONTH is not supported"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL 1 YEAR", "months and years have no fixed length"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL 1 DAY_HOUR", "INTERVAL n DAY_HOUR is not supported"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL price DAY", "INTERVAL needs an integer literal"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL 1.5 DAY", "INTERVAL needs an integer literal"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL '1' DAY", "unquoted: INTERVAL 1 HOUR"},
		{"t_s > TIMESTAMP '2026-01-01' - INTERVAL '1 hour'",
			`INTERVAL takes an unquoted integer and then a unit, as in INTERVAL 1 HOUR, not the string '1 hour'`},
		{"price + INTERVAL 1 DAY > 0", "an INTERVAL is added to a timestamp or date, not a decimal"},
		{"INTERVAL 1 DAY - t_s > 0", "INTERVAL is only added to or subtracted from"},
		{"t_s > TIMESTAMP '2026-13-01'", `"2026-13-01" is not a timestamp`},
		{"day = DATE '2026-11-30 10:00:00'", `is not a date: write 'YYYY-MM-DD'`},
		{"t_s > 'yesterday'", `"yesterday" is not a timestamp`},
		{"t_s > TIMESTAMP '3000-01-01'", "outside the years 1678 to 2261"},
		{"t_s > TIME '10:00:00'", "a TIME literal"},
		{"t_s > 1700000000", "cannot compare timestamp with integer: a number is not read as an instant; " +
			"write it as TIMESTAMP 'YYYY-MM-DD HH:MM:SS' (UTC)"},
		{"1.5 <= t_s", "cannot compare float with timestamp: a number is not read as an instant"},
		{"t_s = s", "cannot compare timestamp with string"},
		{"t_s + 1 > 0", "arithmetic + needs numbers, not a timestamp"},
		{"t_s", "the expression is a timestamp"},
		{"price", "the expression is a decimal"},
		{"CAST(price AS DOUBLE) > 1", "CAST is not supported"},
		{"EXTRACT(YEAR FROM t_s) = 2026", "EXTRACT is not supported"},
		{"price > big", "a decimal column is compared with a number literal or NULL"},
		{"price > 'cheap'", "compared with a number, not a string"},
		{"price IN (1, big)", "IN on a decimal column takes number literals and NULL"},
		{"coalesce(price, 0.001) > 1", "0.001 is not a value of decimal(10, 2)"},
		{"coalesce(price, 100000000) > 1", "100000000 is not a value of decimal(10, 2)"},
		{"coalesce(price, big) > 1", "its decimals must be of one type"},
		{"coalesce(price, s) IS NULL", "type mismatch: coalesce of decimal(10, 2) and string"},
		{"price * 2 > 1", "arithmetic * needs numbers, not a decimal"},
	} {
		_, err := expr.Parse(tc.text, timeSchema)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}

// TestTimePruning writes timestamps, dates and decimals to Parquet in row
// groups of 10 rows and checks which row groups a filter skips, and that no
// skipped row group holds a matching row.
func TestTimePruning(t *testing.T) {
	mem := checkedMem(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "t_s", Type: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, Nullable: true},
		{Name: "t_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "d9", Type: &arrow.Decimal128Type{Precision: 9, Scale: 2}, Nullable: true},   // INT32
		{Name: "d18", Type: &arrow.Decimal128Type{Precision: 18, Scale: 3}, Nullable: true}, // INT64
		{Name: "d30", Type: &arrow.Decimal128Type{Precision: 30, Scale: 1}, Nullable: true}, // FIXED_LEN_BYTE_ARRAY
		{Name: "d60", Type: &arrow.Decimal256Type{Precision: 60, Scale: 1}, Nullable: true}, // FIXED_LEN_BYTE_ARRAY, 26 bytes
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	const start = 1796083200 // 2026-12-01 00:00:00 UTC
	for i := range 50 {
		// an hour a row, ten hours a row group; a day a row group for day
		b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(start + 3600*i))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(start+3600*i) * 1e9))
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(20788 + i/10))
		for f, scale := range []int64{1, 10, 1} { // unscaled: i - 25 in units of the last digit
			b.Field(3 + f).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i-25) * scale))
		}
		b.Field(6).(*array.Decimal256Builder).Append(decimal256.FromI64(int64(i - 25)))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r := writeRowGroups(t, schema, rec, mem)
	defer r.Close()
	for i, width := range map[int]int{5: 13, 6: 26} { // d30, d60
		if c := r.MetaData().Schema.Column(i); c.PhysicalType() != parquet.Types.FixedLenByteArray || c.TypeLength() != width {
			t.Fatalf("%s is stored as %s of %d bytes", c.Name(), c.PhysicalType(), c.TypeLength())
		}
	}
	st := rowGroupStats(r)
	checkSkips(t, schema, rec, st, mem, []skipCase{
		{"t_s >= TIMESTAMP '2026-12-02 12:00:00'", []bool{true, true, true, false, false}},
		{"t_ns < '2026-12-01 10:00:00'", []bool{false, true, true, true, true}},
		{"t_ns > TIMESTAMP '2026-12-03 00:00:00' + INTERVAL 1 DAY", []bool{true, true, true, true, true}},
		{"t_s BETWEEN '2026-12-02 01:00:00' AND '2026-12-02 02:00:00'", []bool{true, true, false, true, true}},
		{"t_s IN ('2026-12-01 03:00:00', '2026-12-03 04:00:00')", []bool{false, true, true, true, true}},
		{"day = DATE '2026-12-03'", []bool{true, true, false, true, true}},
		{"day > '2026-12-03'", []bool{true, true, true, false, false}},
		{"d9 > 0.145", []bool{true, true, true, true, false}}, // unscaled 14.5: rows 40..49
		{"d9 >= 0.15", []bool{true, true, true, true, false}},
		{"d9 = -0.25", []bool{false, true, true, true, true}},
		{"d18 < -0.149", []bool{false, false, true, true, true}}, // unscaled -149: rows 0..10
		{"d30 >= 2.4", []bool{true, true, true, true, false}},
		{"d30 < -1.55", []bool{false, true, true, true, true}},
		{"d30 IN (0.5, 9.9)", []bool{true, true, true, false, true}},
		{"d60 >= 2.4", []bool{true, true, true, true, false}},
		{"d60 < -1.55", []bool{false, true, true, true, true}},
	})
}
