package table

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/croupier-data/croupier/core/errcode"
)

// Some runs that read a croupier table from several processes (the ranks of
// a trainer and their worker processes) must decide something from what the
// table holds at one moment, such as which version is the newest, and decide
// it the same in every process and again when resumed. Decide records the
// first process's decision with the store's exclusive create, the mechanism
// of commits; every other process, and a resumed run, reads that decision
// back.

// decisionsDir is the folder of a croupier table holding decisions. Cleanup
// leaves it alone.
const decisionsDir = "_decisions/"

// decisionName is what Decide takes as a name: a relative path of plain
// segments, none of them . or ..
var decisionName = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)

// validDecisionName reports whether name is a decision's name.
func validDecisionName(name string) bool {
	return decisionName.MatchString(name) && !slices.ContainsFunc(strings.Split(name, "/"), func(s string) bool { return s == "." || s == ".." })
}

// Decision returns the decision name of the table, recorded by Decide; an
// error of code errcode.NotFound when none was.
func (t *Table) Decision(ctx context.Context, name string) ([]byte, error) {
	key, err := t.decisionKey("read decision", name)
	if err != nil {
		return nil, err
	}
	return t.loc.ReadAll(ctx, key)
}

// decisionKey returns the key of decision name, checking the name.
func (t *Table) decisionKey(op, name string) (string, error) {
	if t.pin.Kind != KindCroupier {
		return "", errcode.New(errcode.InvalidArgument, op, t.pin.URI, "a plain Parquet dataset holds no decisions")
	}
	if !validDecisionName(name) {
		return "", errcode.New(errcode.InvalidArgument, op, t.pin.URI,
			"decision name %q is not a relative path of letters, digits, '.', '-' and '_' (no segment . or ..)", name)
	}
	return t.loc.Join(decisionsDir + name), nil
}

// Decide records data as the decision name of the table, unless a decision
// of that name was recorded already, and returns the decision recorded: data,
// or the earlier one. Of several processes racing, exactly one records its
// data, and all return it. It needs a store that honours conditional writes,
// as commits do, and the right to write the table's folder.
func (t *Table) Decide(ctx context.Context, name string, data []byte) ([]byte, error) {
	const op = "record decision"
	key, err := t.decisionKey(op, name)
	if err != nil {
		return nil, err
	}
	if err := t.loc.CreateExclusive(ctx, key, data); err != nil && errcode.Of(err) != errcode.AlreadyExists {
		return nil, err
	}
	got, err := t.loc.ReadAll(ctx, key)
	if err != nil {
		return nil, errcode.Wrap(fmt.Errorf("reading back the decision: %w", err), errcode.Of(err), op, t.loc.ObjectURI(key))
	}
	return got, nil
}
