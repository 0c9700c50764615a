package floodgate

import (
	"flag"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateAPI = flag.Bool("update-api", false, "rewrite testdata/api.txt with the exported names of today's packages")

// apiFile lists every exported name of every public package of the module,
// one "<package path> <name>" a line, sorted: a type's methods, fields and
// interface methods are written Type.Name.
const apiFile = "testdata/api.txt"

const apiHeader = `# The exported names of floodgate's public packages, "<package> <name>",
# checked by TestPublicAPI (api_test.go). Add a name only for what an
# application calls; plumbing for floodgate's own packages goes internal.
`

// TestPublicAPI keeps the public API to what applications call (issue 25):
// every exported name of a public package must be in testdata/api.txt, and
// every name there must still be exported. A new export fails this test,
// naming it, until the list is edited on purpose (by hand, or with go test
// -run TestPublicAPI -update-api and a look at the diff); helpers that only
// floodgate's own packages need belong in an internal package instead.
func TestPublicAPI(t *testing.T) {
	got := exportedNames(t)
	if *updateAPI {
		data := apiHeader + strings.Join(got, "\n") + "\n"
		if err := os.WriteFile(apiFile, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	var added, removed []string
	for _, n := range got {
		if !slices.Contains(want, n) {
			added = append(added, n)
		}
	}
	for _, n := range want {
		if !slices.Contains(got, n) {
			removed = append(removed, n)
		}
	}
	if len(added) > 0 {
		t.Errorf("exported but not in %s (would an application call it? if not, move it to an internal package; if so, add it to the list):\n\t%s",
			apiFile, strings.Join(added, "\n\t"))
	}
	if len(removed) > 0 {
		t.Errorf("in %s but no longer exported (remove them from the list, and say so in CHANGELOG.md):\n\t%s",
			apiFile, strings.Join(removed, "\n\t"))
	}
}

// exportedNames returns the exported names of every public package of the
// module (not internal, not a command, not another module such as bench/),
// parsed from source with go/parser and go/doc, for every platform the
// files are built for.
func exportedNames(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		base := d.Name()
		if dir != "." && (base == "internal" || base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != "." {
			return filepath.SkipDir // another module
		}
		pkgNames, err := packageNames(dir)
		if err != nil {
			return err
		}
		names = append(names, pkgNames...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// packageNames returns "<path> <name>" for each exported name of the
// package in dir, or nothing when dir holds no library package.
func packageNames(dir string) ([]string, error) {
	files := map[string]bool{}
	for _, goos := range []string{"linux", "darwin", "windows", "freebsd"} {
		ctx := build.Default
		ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = goos, "amd64", false
		p, err := ctx.ImportDir(dir, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil, nil
			}
			return nil, err
		}
		if p.Name == "main" {
			return nil, nil
		}
		for _, f := range p.GoFiles {
			files[f] = true
		}
	}
	fset := token.NewFileSet()
	var asts []*ast.File
	for _, f := range slices.Sorted(maps.Keys(files)) {
		af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		asts = append(asts, af)
	}
	pkgPath := path.Join("github.com/floodgate-dev/floodgate", filepath.ToSlash(dir))
	p, err := doc.NewFromFiles(fset, asts, pkgPath)
	if err != nil {
		return nil, err
	}
	rel := filepath.ToSlash(dir)
	if rel == "." {
		rel = "floodgate"
	}
	var out []string
	add := func(name string) { out = append(out, rel+" "+name) }
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if token.IsExported(n) {
					add(n)
				}
			}
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		add(f.Name)
	}
	for _, typ := range p.Types {
		add(typ.Name)
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			add(f.Name)
		}
		for _, m := range typ.Methods {
			add(typ.Name + "." + m.Name)
		}
		for _, spec := range typ.Decl.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || ts.Name.Name != typ.Name {
				continue
			}
			var fields *ast.FieldList
			switch tt := ts.Type.(type) {
			case *ast.StructType:
				fields = tt.Fields
			case *ast.InterfaceType:
				fields = tt.Methods
			}
			if fields == nil {
				continue
			}
			for _, f := range fields.List {
				for _, n := range f.Names {
					if token.IsExported(n.Name) {
						add(typ.Name + "." + n.Name)
					}
				}
				if len(f.Names) == 0 { // embedded
					if id := embeddedName(f.Type); token.IsExported(id) {
						add(typ.Name + "." + id)
					}
				}
			}
		}
	}
	return out, nil
}

// embeddedName is the name an embedded field or interface is known by.
func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(e.X)
	case *ast.IndexListExpr:
		return embeddedName(e.X)
	}
	return ""
}
