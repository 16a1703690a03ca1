package store

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestPartsReadOnlyTheirOwnFields pins the shape of docs/design.md "The parts of store": a
// part's fields are read only by its own methods, its own helper types and its constructor;
// every other part asks it through its methods. It type-checks the package's non-test files
// and lists each read of a part's field from code whose receiver is another type.
func TestPartsReadOnlyTheirOwnFields(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	parts := map[string]bool{"versionList": true, "objectStore": true, "renders": true,
		"collector": true, "ingester": true, "checker": true, "materialized": true,
		"fileCopies": true, "rankState": true, "groupPublisher": true, "pinSet": true,
		"gcRecordKeeper": true, "holds": true, "retainer": true}
	// The helper types a part works through: they are the part.
	helpers := map[string]string{"matView": "materialized", "copyWriter": "fileCopies",
		"fastPass": "renders", "renderCheck": "renders", "planWalker": "objectStore",
		"Writer": "ingester", "baseReader": "ingester", "FileStream": "ingester",
		"retainer": "collector", "holds": "collector", "repairer": "checker"}

	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") || strings.HasSuffix(n, "_other.go") {
			continue
		}
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, n, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: exportDataImporter(t, fset, files)}
	pkg, err := conf.Check("github.com/weightfs/weightfs/store", fset, files, info)
	if err != nil {
		t.Fatalf("type-check: %v", err)
	}
	owner := map[*types.Var]string{}
	for name := range parts {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok {
			t.Fatalf("part %s is not a type of the package (docs/design.md names it)", name)
		}
		st := tn.Type().Underlying().(*types.Struct)
		for i := range st.NumFields() {
			owner[st.Field(i)] = name
		}
	}
	var reaches []string
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			reader := receiverName(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				v, ok := info.Uses[sel.Sel].(*types.Var)
				if !ok {
					return true
				}
				o := owner[v]
				switch {
				case o == "" || o == reader || helpers[reader] == o || helpers[o] == reader:
				case reader == "" && strings.HasPrefix(fd.Name.Name, "new"): // its constructor
				default:
					reaches = append(reaches, fset.Position(sel.Pos()).String()+": "+o+"."+v.Name()+" read by "+readerName(reader, fd))
				}
				return true
			})
		}
	}
	sort.Strings(reaches)
	for _, r := range reaches {
		t.Errorf("a part's field read from outside it (ask it through a method): %s", r)
	}
}

// exportDataImporter imports the packages the files import from their compiled export data
// (go list -export: the build cache go test has just filled), not by type-checking each of them
// and everything below them from source again: only the package itself is checked from source,
// and only its own types' fields are asked about.
func exportDataImporter(t *testing.T, fset *token.FileSet, files []*ast.File) types.Importer {
	t.Helper()
	imports := map[string]bool{}
	for _, f := range files {
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if p != "unsafe" && p != "C" {
				imports[p] = true
			}
		}
	}
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"},
		slices.Sorted(maps.Keys(imports))...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	export := map[string]string{}
	for line := range strings.Lines(string(out)) {
		p, file, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && file != "" {
			export[p] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

func receiverName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) != 1 {
		return ""
	}
	e := fd.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func readerName(recv string, fd *ast.FuncDecl) string {
	if recv == "" {
		return "func " + fd.Name.Name
	}
	return "(" + recv + ")." + fd.Name.Name
}
