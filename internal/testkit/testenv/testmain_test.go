package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every test binary of the module that links this package reports its
// skips: its package's TestMain runs the tests through Run or Wrap.
// Without that, its skips would go uncounted and a bare `go test ./...`
// would again say nothing of them.
func TestEveryPackageReportsItsSkips(t *testing.T) {
	const self = "github.com/redfence/redfence/internal/testkit/testenv"
	// go test puts its own go first on the test's PATH.
	out, err := exec.Command("go", "list", "-test",
		"-f", `{{.ImportPath}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .Deps " "}}`,
		"github.com/redfence/redfence/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 || !strings.HasSuffix(f[0], ".test") || !slices.Contains(strings.Fields(f[2]), self) ||
			f[0] == self+".test" { // whose tests only fake skips
			continue
		}
		checked++
		if !reportsSkips(t, f[1]) {
			t.Errorf("%s: the test binary links testenv, but no TestMain of %s calls testenv.Run or testenv.Wrap: "+
				"add one (main_test.go: func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) })",
				strings.TrimSuffix(f[0], ".test"), f[1])
		}
	}
	if checked == 0 {
		t.Fatalf("go list found no test binary that links %s:\n%s", self, out)
	}
}

// reportsSkips reports whether a TestMain among dir's test files calls
// testenv.Run or testenv.Wrap.
func reportsSkips(t *testing.T, dir string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "TestMain" || fn.Body == nil {
				continue
			}
			found := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testenv" && (sel.Sel.Name == "Run" || sel.Sel.Name == "Wrap") {
					found = true
				}
				return !found
			})
			if found {
				return true
			}
		}
	}
	return false
}
