package expr

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"

	"github.com/croupier-data/croupier/core/errcode"
)

// Expr is a parsed, type-checked expression. It is immutable and safe for
// concurrent use.
type Expr struct {
	text    string
	root    node
	columns []string
}

// String returns the text the expression was parsed from.
func (e *Expr) String() string { return e.text }

// Columns returns the top-level columns the expression reads, sorted, as the
// schema spells them. A record batch given to Eval needs only these.
func (e *Expr) Columns() []string { return slices.Clone(e.columns) }

// Type returns the Arrow type of Eval's result: boolean, int64, float64 or
// utf8. A filter must be boolean; a computed split must be int64.
func (e *Expr) Type() arrow.DataType { return e.root.kind().arrowType() }

const evalOp = "evaluate expression"

// Eval evaluates the expression on every row of rec and returns an array of
// Type() with rec.NumRows() values; the caller releases it. rec must hold the
// columns named by Columns() with the types Parse saw (other columns are
// ignored). Intermediate arrays are allocated from mem (nil: the default
// allocator) and released before Eval returns.
func (e *Expr) Eval(ctx context.Context, rec arrow.RecordBatch, mem memory.Allocator) (arrow.Array, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	ev := &evaluator{
		ctx: ctx,
		// The compute executor leaks output buffers when its context is
		// canceled mid-call, so kernels run without cancellation and ctx
		// is checked between nodes instead.
		kctx: compute.WithAllocator(context.WithoutCancel(ctx), mem),
		mem:  mem,
		rec:  rec,
		n:    int(rec.NumRows()),
	}
	d, err := e.root.eval(ev)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, evalOp, e.text)
	}
	defer d.Release()
	arr, err := ev.array(d)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, evalOp, e.text)
	}
	return arr, nil
}

// Mask evaluates a boolean expression and reports, for each row of rec,
// whether it is TRUE; rows where it is FALSE or NULL are false, as in a SQL
// WHERE clause.
func (e *Expr) Mask(ctx context.Context, rec arrow.RecordBatch, mem memory.Allocator) ([]bool, error) {
	if e.root.kind() != kBool && e.root.kind() != kNull {
		return nil, errcode.New(errcode.InvalidArgument, evalOp, e.text,
			"a filter must be a boolean expression, not a %s", e.root.kind())
	}
	arr, err := e.Eval(ctx, rec, mem)
	if err != nil {
		return nil, err
	}
	defer arr.Release()
	b := arr.(*array.Boolean)
	mask := make([]bool, b.Len())
	for i := range mask {
		mask[i] = b.IsValid(i) && b.Value(i)
	}
	return mask, nil
}

type evaluator struct {
	ctx  context.Context // the caller's; checked between nodes
	kctx context.Context // for kernels: never canceled, carries mem
	mem  memory.Allocator
	rec  arrow.RecordBatch
	n    int
}

// call runs a compute function. The result is owned by the caller.
func (ev *evaluator) call(name string, opts compute.FunctionOptions, args ...compute.Datum) (compute.Datum, error) {
	if err := ev.ctx.Err(); err != nil {
		return nil, err
	}
	out, err := compute.CallFunction(ev.kctx, name, opts, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// array returns d as an array of ev.n values, broadcasting a scalar. The
// caller releases the result; d is left alone.
func (ev *evaluator) array(d compute.Datum) (arrow.Array, error) {
	switch d := d.(type) {
	case *compute.ArrayDatum:
		return d.MakeArray(), nil
	case *compute.ScalarDatum:
		return scalar.MakeArrayFromScalar(d.Value, ev.n, ev.mem)
	}
	return nil, fmt.Errorf("unexpected datum %s", d)
}

// own wraps a freshly made array in a Datum that takes over the caller's
// reference.
func own(a arrow.Array) compute.Datum {
	d := compute.NewDatum(a)
	a.Release()
	return d
}

// evalAll evaluates nodes in order; on error it releases what it made.
func (ev *evaluator) evalAll(nodes ...node) ([]compute.Datum, error) {
	out := make([]compute.Datum, 0, len(nodes))
	for _, n := range nodes {
		d, err := n.eval(ev)
		if err != nil {
			release(out...)
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// arrays evaluates nodes and materialises each as an array of ev.n values.
func (ev *evaluator) arrays(nodes ...node) ([]arrow.Array, error) {
	ds, err := ev.evalAll(nodes...)
	if err != nil {
		return nil, err
	}
	defer release(ds...)
	out := make([]arrow.Array, 0, len(ds))
	for _, d := range ds {
		a, err := ev.array(d)
		if err != nil {
			releaseArrays(out...)
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func release(ds ...compute.Datum) {
	for _, d := range ds {
		d.Release()
	}
}

func releaseArrays(as ...arrow.Array) {
	for _, a := range as {
		a.Release()
	}
}

// callNodes evaluates nodes and passes them to a compute function.
func (ev *evaluator) callNodes(name string, opts compute.FunctionOptions, nodes ...node) (compute.Datum, error) {
	ds, err := ev.evalAll(nodes...)
	if err != nil {
		return nil, err
	}
	defer release(ds...)
	return ev.call(name, opts, ds...)
}
