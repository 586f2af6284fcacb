package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// exportList is the checked-in list of the C ABI: the C signature of every
// export and of every callback type the exports take, as cgo writes them into
// libcroupier.h, and the abiVersion they were written at. Python's
// declarations are checked against it (python/tests/test_abi.py).
const exportList = "exports.json"

var update = flag.Bool("update", false, "rewrite "+exportList+" from the build (go generate ./cabi)")

// abiList is the content of exportList.
type abiList struct {
	ABIVersion int     `json:"abi_version"`
	Callbacks  []cFunc `json:"callbacks"`
	Exports    []cFunc `json:"exports"`
}

// cFunc is a C function or function pointer type: its name, its result type
// and its parameters as [type, name] pairs, the types spelt as in C with the
// pointer stars against the type ("char*").
type cFunc struct {
	Name   string      `json:"name"`
	Result string      `json:"result"`
	Params [][2]string `json:"params"`
}

// TestExportList checks that the exports of the library and the callback
// types they take are those of exportList, and that the list was written at
// the current abiVersion: a change a C caller could notice needs abiVersion
// bumped and the list regenerated, and a list left from another version is
// stale. With -update it rewrites the list, unless the signatures changed
// while abiVersion did not.
func TestExportList(t *testing.T) {
	built := builtABI(t)
	listed, err := readABIList(exportList)
	if err != nil && !(*update && errors.Is(err, fs.ErrNotExist)) {
		t.Fatal(err)
	}
	changes := abiChanges(listed, built)
	if *update {
		if listed.ABIVersion == abiVersion && len(changes) > 0 {
			t.Fatalf("the C ABI changed, but abiVersion is still %d: bump it (cabi/main.go, and ABI_VERSION in python/croupier/_native.py), then regenerate %s:\n%s",
				abiVersion, exportList, strings.Join(changes, "\n"))
		}
		if err := writeABIList(exportList, built); err != nil {
			t.Fatal(err)
		}
		return
	}
	regenerate := "regenerate it with `go generate ./cabi` (or `make exports`)"
	if listed.ABIVersion != abiVersion {
		t.Fatalf("%s was written at C ABI version %d, but abiVersion is %d: %s", exportList, listed.ABIVersion, abiVersion, regenerate)
	}
	if len(changes) > 0 {
		t.Fatalf("the C ABI differs from %s at version %d; a change a caller could notice needs abiVersion bumped (cabi/main.go, and ABI_VERSION in python/croupier/_native.py), then %s:\n%s",
			exportList, abiVersion, regenerate, strings.Join(changes, "\n"))
	}
	if renamed := renamedParams(listed, built); len(renamed) > 0 {
		t.Fatalf("parameter names of %v differ from %s (their types do not): %s; abiVersion stays", renamed, exportList, regenerate)
	}
}

// builtABI is the ABI of the package as it is now, read from the header that
// cgo writes for its exports (the one `go build -buildmode=c-shared` writes
// next to the library).
func builtABI(t *testing.T) abiList {
	t.Helper()
	cc := goEnv(t, "CC")
	if _, err := exec.LookPath(strings.Fields(cc + " gcc")[0]); err != nil {
		t.Skipf("no C compiler (go env CC is %q): the exports are read from the header cgo writes with one", cc)
	}
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	header := filepath.Join(dir, "libcroupier.h")
	args := append([]string{"tool", "cgo", "-objdir", dir, "-exportheader", header}, pkg.CgoFiles...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CC="+cc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool cgo: %v\n%s", err, out)
	}
	text, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	abi, err := parseHeader(string(text))
	if err != nil {
		t.Fatal(err)
	}
	abi.ABIVersion = abiVersion
	if want := exportNames(t, pkg.CgoFiles); !slices.Equal(funcNames(abi.Exports), want) {
		t.Fatalf("the header declares %v, but the package exports %v: the parse is wrong", funcNames(abi.Exports), want)
	}
	return abi
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

var (
	externLine   = regexp.MustCompile(`^extern (.+?)\s*\b(croupier_\w+)\((.*)\);$`)
	callbackLine = regexp.MustCompile(`^typedef (.+?)\s*\(\*\s*(croupier_\w+)\)\((.*)\);$`)
	paramDecl    = regexp.MustCompile(`^(.+?)\s*\b(\w+)$`)
)

// parseHeader reads the exports (`extern` lines) and the croupier_* function
// pointer types (`typedef` lines, copied from the cgo preambles) of a header
// that cgo wrote, each sorted by name.
func parseHeader(header string) (abiList, error) {
	var abi abiList
	for _, line := range strings.Split(header, "\n") {
		line = strings.TrimSpace(line)
		into, m := &abi.Exports, externLine.FindStringSubmatch(line)
		if m == nil {
			into, m = &abi.Callbacks, callbackLine.FindStringSubmatch(line)
		}
		if m == nil {
			continue
		}
		fn := cFunc{Name: m[2], Result: cType(m[1]), Params: [][2]string{}}
		if params := strings.TrimSpace(m[3]); params != "void" && params != "" {
			for _, p := range strings.Split(params, ",") {
				d := paramDecl.FindStringSubmatch(strings.TrimSpace(p))
				if d == nil {
					return abi, fmt.Errorf("%s: cannot read parameter %q", fn.Name, p)
				}
				fn.Params = append(fn.Params, [2]string{cType(d[1]), d[2]})
			}
		}
		*into = append(*into, fn)
	}
	byName := func(a, b cFunc) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(abi.Exports, byName)
	slices.SortFunc(abi.Callbacks, byName)
	return abi, nil
}

// cType spells a C type with single spaces and the stars against it.
func cType(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, " *", "*")
}

// exportNames are the names of the //export directives of files, sorted.
func exportNames(t *testing.T, files []string) []string {
	t.Helper()
	var names []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if name, ok := strings.CutPrefix(c.Text, "//export "); ok {
					names = append(names, strings.TrimSpace(name))
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

func funcNames(fns []cFunc) []string {
	var names []string
	for _, fn := range fns {
		names = append(names, fn.Name)
	}
	return names
}

// abiChanges names every difference a C caller could notice between two
// lists: a function or callback type added or removed, or one whose result
// or parameter types differ. Parameter names are not part of the ABI.
func abiChanges(was, is abiList) []string {
	var changes []string
	for _, kind := range []struct {
		name    string
		was, is []cFunc
	}{{"callback type", was.Callbacks, is.Callbacks}, {"export", was.Exports, is.Exports}} {
		for _, w := range kind.was {
			i := slices.IndexFunc(kind.is, func(f cFunc) bool { return f.Name == w.Name })
			switch {
			case i < 0:
				changes = append(changes, fmt.Sprintf("  %s %s: listed, no longer in the library", kind.name, w.Name))
			case !sameTypes(w, kind.is[i]):
				changes = append(changes, fmt.Sprintf("  %s %s: listed as\n    %s\n  is now\n    %s", kind.name, w.Name, w, kind.is[i]))
			}
		}
		for _, f := range kind.is {
			if !slices.ContainsFunc(kind.was, func(w cFunc) bool { return w.Name == f.Name }) {
				changes = append(changes, fmt.Sprintf("  %s %s: new, not listed: %s", kind.name, f.Name, f))
			}
		}
	}
	return changes
}

func sameTypes(a, b cFunc) bool {
	return a.Result == b.Result && slices.EqualFunc(a.Params, b.Params, func(p, q [2]string) bool { return p[0] == q[0] })
}

// renamedParams names the functions of is whose parameters are named
// otherwise in was; abiChanges found no other difference.
func renamedParams(was, is abiList) []string {
	var names []string
	for _, fn := range slices.Concat(is.Callbacks, is.Exports) {
		for _, w := range slices.Concat(was.Callbacks, was.Exports) {
			if w.Name == fn.Name && !slices.Equal(w.Params, fn.Params) {
				names = append(names, fn.Name)
			}
		}
	}
	return names
}

// String is the C declaration of f.
func (f cFunc) String() string {
	params := make([]string, len(f.Params))
	for i, p := range f.Params {
		params[i] = p[0] + " " + p[1]
	}
	if len(params) == 0 {
		params = []string{"void"}
	}
	return fmt.Sprintf("%s %s(%s)", f.Result, f.Name, strings.Join(params, ", "))
}

func readABIList(path string) (abiList, error) {
	var abi abiList
	b, err := os.ReadFile(path)
	if err != nil {
		return abi, err
	}
	if err := json.Unmarshal(b, &abi); err != nil {
		return abi, fmt.Errorf("%s: %w", path, err)
	}
	return abi, nil
}

// writeABIList writes abi as JSON with one function a line, for diffs that
// name the functions that changed.
func writeABIList(path string, abi abiList) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"abi_version\": %d,\n", abi.ABIVersion)
	for i, kind := range []struct {
		key string
		fns []cFunc
	}{{"callbacks", abi.Callbacks}, {"exports", abi.Exports}} {
		fmt.Fprintf(&b, "  %q: [\n", kind.key)
		for j, fn := range kind.fns {
			line, err := json.Marshal(fn)
			if err != nil {
				return err
			}
			b.WriteString("    ")
			b.Write(line)
			if j < len(kind.fns)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("  ]")
		if i == 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// TestABIChanges checks that the header is read as cgo writes it, and that
// each kind of change is named, and a renamed parameter is not a change.
func TestABIChanges(t *testing.T) {
	const header = `typedef void (*croupier_cb)(const char* phase, int64_t  done);
#ifdef __cplusplus
extern "C" {
#endif
extern size_t _GoStringLen(_GoString_ s);
extern int64_t croupier_count(void);
extern int croupier_open(char* uri, struct ArrowArray *out, croupier_cb cb, char** errOut);
extern char* croupier_name(uint64_t h);
`
	was, err := parseHeader(header)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(slices.Concat(was.Callbacks, was.Exports)),
		"[void croupier_cb(const char* phase, int64_t done) int64_t croupier_count(void) "+
			"char* croupier_name(uint64_t h) int croupier_open(char* uri, struct ArrowArray* out, croupier_cb cb, char** errOut)]"; got != want {
		t.Fatalf("parsed\n%s\nwant\n%s", got, want)
	}
	changed := strings.NewReplacer(
		"int64_t  done", "int64_t* done", // a callback's parameter type
		"croupier_count(void)", "croupier_count(int n)", // a parameter added
		"char* croupier_name", "const char* croupier_name", // a result type
	).Replace(header) + "extern void croupier_new(void);\n"
	is, err := parseHeader(strings.Replace(changed, "extern int croupier_open", "int croupier_open", 1))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(abiChanges(was, is), "\n")
	for _, want := range []string{
		"callback type croupier_cb: listed as\n    void croupier_cb(const char* phase, int64_t done)\n  is now\n    void croupier_cb(const char* phase, int64_t* done)",
		"export croupier_count: listed as\n    int64_t croupier_count(void)\n  is now\n    int64_t croupier_count(int n)",
		"export croupier_name: listed as\n    char* croupier_name(uint64_t h)\n  is now\n    const char* croupier_name(uint64_t h)",
		"export croupier_open: listed, no longer in the library",
		"export croupier_new: new, not listed: void croupier_new(void)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("changes\n%s\ndo not name\n%s", got, want)
		}
	}
	renamed, err := parseHeader(strings.ReplaceAll(header, "errOut", "err"))
	if err != nil {
		t.Fatal(err)
	}
	if c := abiChanges(was, renamed); len(c) > 0 {
		t.Errorf("a renamed parameter is a change: %v", c)
	}
	if r := renamedParams(was, renamed); !slices.Equal(r, []string{"croupier_open"}) {
		t.Errorf("renamed: %v, want [croupier_open]", r)
	}
}
