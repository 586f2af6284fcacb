package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// unguarded are the exports that run no Go code that could panic, and why.
var unguarded = map[string]string{
	"croupier_version":     "returns a C string made at load",
	"croupier_abi_version": "returns a constant",
	"croupier_string_free": "calls C free only",
}

// TestEveryExportIsGuarded checks that every export does all its work inside
// guard (a panic that crosses the C ABI kills the host process): its body is
// `return guard(errOut, …)`, or, for an export without an error out
// parameter, `guard(nil, …)` and a return of what the guarded function set.
func TestEveryExportIsGuarded(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	exports := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Doc == nil || !hasExport(fn.Doc) {
				continue
			}
			exports++
			name := fn.Name.Name
			if why, ok := unguarded[name]; ok {
				if calls := goCalls(fn.Body); len(calls) > 0 {
					t.Errorf("%s (unguarded: %s) calls %v", name, why, calls)
				}
				continue
			}
			if !guarded(fn.Body.List) {
				t.Errorf("%s does work outside guard: %s", name, fset.Position(fn.Pos()))
			}
		}
	}
	if exports < 20 {
		t.Fatalf("found %d exports; the parse is wrong", exports)
	}
}

func hasExport(doc *ast.CommentGroup) bool {
	for _, c := range doc.List {
		if strings.HasPrefix(c.Text, "//export ") {
			return true
		}
	}
	return false
}

func isGuardCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == "guard"
}

func guarded(body []ast.Stmt) bool {
	switch len(body) {
	case 1: // return guard(errOut, func() error { … })
		ret, ok := body[0].(*ast.ReturnStmt)
		return ok && len(ret.Results) == 1 && isGuardCall(ret.Results[0])
	case 2: // guard(nil, func() error { … }); return n
		call, ok := body[0].(*ast.ExprStmt)
		ret, ok2 := body[1].(*ast.ReturnStmt)
		return ok && ok2 && isGuardCall(call.X) && len(goCalls(ret)) == 0
	}
	return false
}

// goCalls lists the calls in n that are not calls into C.
func goCalls(n ast.Node) []string {
	var out []string
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "C" {
				return true
			}
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && exprName(sel) == "unsafe.Pointer" {
			return true
		}
		out = append(out, exprName(call.Fun))
		return true
	})
	return out
}

func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprName(e.X) + "." + e.Sel.Name
	}
	return "?"
}

// TestEveryGoroutineRecovers checks that every goroutine the library starts
// (a go statement, or an errgroup's Go or TryGo) runs a function literal, or
// a function or method of its package, whose leading defers include a
// recover into an error: a panic that leaves any goroutine of the shared
// library kills the host process.
func TestEveryGoroutineRecovers(t *testing.T) {
	fset := token.NewFileSet()
	sites := 0
	for _, root := range []string{"../core", "../permutation", "../loader", "."} {
		pkgs := map[string][]*ast.File{} // by directory
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range pkgs {
			funcs := map[string]*ast.FuncLit{} // the package's functions and methods, by name
			for _, f := range files {
				for _, d := range f.Decls {
					if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
						funcs[fd.Name.Name] = &ast.FuncLit{Type: fd.Type, Body: fd.Body}
					}
				}
			}
			for _, f := range files {
				ast.Inspect(f, func(n ast.Node) bool {
					var body ast.Expr
					switch n := n.(type) {
					case *ast.GoStmt:
						body = n.Call.Fun
					case *ast.CallExpr:
						sel, ok := n.Fun.(*ast.SelectorExpr)
						if !ok || (sel.Sel.Name != "Go" && sel.Sel.Name != "TryGo") || len(n.Args) != 1 {
							return true
						}
						body = n.Args[0]
					default:
						return true
					}
					switch fn := body.(type) { // a named function: check its declaration
					case *ast.Ident:
						if lit, ok := funcs[fn.Name]; ok {
							body = lit
						}
					case *ast.SelectorExpr:
						if lit, ok := funcs[fn.Sel.Name]; ok {
							body = lit
						}
					}
					sites++
					if !recoversFirst(body) {
						t.Errorf("%s: goroutine does not start with a deferred recover", fset.Position(n.Pos()))
					}
					return true
				})
			}
		}
	}
	if sites < 5 {
		t.Fatalf("found %d goroutine sites; the walk is wrong", sites)
	}
}

// recoversFirst reports whether fn is a function literal whose first
// statement is `defer errcode.Recover(…)` (or the table package's
// recoverTo).
func recoversFirst(fn ast.Expr) bool {
	lit, ok := fn.(*ast.FuncLit)
	if !ok {
		return false
	}
	// The leading defers are all registered before any other statement runs,
	// so a recover among them catches every panic of the body.
	for _, st := range lit.Body.List {
		d, ok := st.(*ast.DeferStmt)
		if !ok {
			return false
		}
		if name := exprName(d.Call.Fun); name == "errcode.Recover" || name == "recoverTo" {
			return true
		}
	}
	return false
}
