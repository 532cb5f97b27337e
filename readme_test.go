package redfence_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go snippets of README.md and docs/usage.md are copies of runnable examples, so that what
// readers copy compiles and does what it says. Each ```go block is preceded,
// on the line just before its fence, by a marker naming the example whose
// body it copies, as its package directory and function name (the
// directory left out for the module's root):
//
//	<!-- example: reentrant.ExampleClient_Do -->
//	<!-- example: storage/redisstore.Example -->
//	<!-- example: Example -->
//
// The snippet must equal the example's body, dedented, after gofmt on both.
// A snippet may instead be a whole program: `package main`, the import
// block of the example's file and `func main` with the example's body.
// Its example must then be alone in its file, so that the import block is
// the example's own and the program compiles as the example does.

// readmes are the files whose Go snippets must be examples.
var readmes = []string{"README.md", "docs/usage.md"}

// TestReadmeSnippetsAreExamples fails when a Go snippet of a README has no
// marker, names no example, or differs from the example's body.
func TestReadmeSnippetsAreExamples(t *testing.T) {
	for _, name := range readmes {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		n, problems := checkSnippets(name, string(text), ".")
		for _, p := range problems {
			t.Error(p)
		}
		if n == 0 {
			t.Errorf("%s: no marked Go snippet found: is the marker syntax still %q?", name, "<!-- example: PKGDIR.ExampleName -->")
		}
	}
}

// TestReadmeSnippetCheckCatchesDrift makes sure the check above can fail:
// a snippet edited by one line, a snippet without marker, a marker naming
// no example, and a marker without a snippet are each reported.
func TestReadmeSnippetCheckCatchesDrift(t *testing.T) {
	body, err := exampleBody(".", "reentrant", "ExampleClient_Do")
	if err != nil {
		t.Fatal(err)
	}
	good := "<!-- example: reentrant.ExampleClient_Do -->\n```go\n" + body + "```\n"
	if _, problems := checkSnippets("good.md", good, "."); len(problems) != 0 {
		t.Fatalf("a faithful copy is reported: %q", problems)
	}
	drifted := strings.Replace(good, `"nightly-report"`, `"weekly-report"`, 1)

	imports, body, err := exampleProgram(".", "", "Example")
	if err != nil {
		t.Fatal(err)
	}
	program := "package main\n\n" + imports + "\n\nfunc main() {\n" + indent(body) + "}\n"
	goodProgram := "<!-- example: Example -->\n```go\n" + program + "```\n"
	if _, problems := checkSnippets("good.md", goodProgram, "."); len(problems) != 0 {
		t.Fatalf("a faithful program is reported: %q", problems)
	}
	// The import block of a file with several examples is not any one
	// example's own.
	doImports, _, err := exampleProgram(".", "reentrant", "ExampleClient_Do")
	if err == nil || !strings.Contains(err.Error(), "alone in its file") {
		t.Fatalf("reentrant.ExampleClient_Do's file has several examples, want an error saying so, got %v (%q)", err, doImports)
	}
	crowded := "<!-- example: reentrant.ExampleClient_Do -->\n```go\npackage main\n\nimport \"context\"\n\nfunc main() {\n" + indent(body) + "}\n```\n"

	cases := map[string]struct{ text, want string }{
		"edited":          {drifted, `README:  err := locks.Do(ctx, "weekly-report"`},
		"no marker":       {"text\n```go\nx := 1\n```\n", "has no marker"},
		"unknown example": {strings.Replace(good, "ExampleClient_Do", "ExampleClient_Nope", 1), "ExampleClient_Nope"},
		"marker alone":    {"<!-- example: reentrant.ExampleClient_Do -->\n\ntext\n", "not followed by"},
		"import dropped":  {strings.Replace(goodProgram, "\t\"log\"\n", "", 1), "(imports) differs"},
		"body edited":     {strings.Replace(goodProgram, `"invoice-42")`, `"invoice-43")`, 1), `"invoice-43"`},
		"not main":        {strings.Replace(goodProgram, "func main()", "func run()", 1), "func main"},
		"crowded file":    {crowded, "alone in its file"},
	}
	for name, c := range cases {
		_, problems := checkSnippets(name+".md", c.text, ".")
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", name, problems, c.want)
		}
	}
}

var markerRE = regexp.MustCompile(`^<!--\s*example:\s*(?:([A-Za-z0-9_./-]+)\.)?(Example\w*)\s*-->$`)

// checkSnippets checks the Go snippets of the Markdown text (file name
// for messages) against the examples under the module root. It returns how
// many marked snippets it checked and what is wrong, one message each.
func checkSnippets(name, text, root string) (checked int, problems []string) {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if m := markerRE.FindStringSubmatch(line); m != nil {
			if i+1 >= len(lines) || !isGoFence(lines[i+1]) {
				problems = append(problems, fmt.Sprintf("%s:%d: marker %s is not followed by a ```go block on the next line", name, i+1, exampleName(m[1], m[2])))
			}
			continue
		}
		if !strings.HasPrefix(line, "```") {
			continue
		}
		start := i
		end := start + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		i = end
		if !isGoFence(lines[start]) {
			continue
		}
		var m []string
		if start > 0 {
			m = markerRE.FindStringSubmatch(strings.TrimSpace(lines[start-1]))
		}
		if m == nil {
			problems = append(problems, fmt.Sprintf("%s:%d: Go snippet has no marker: put <!-- example: PKGDIR.ExampleName --> on the line before its fence, naming the example it copies", name, start+1))
			continue
		}
		checked++
		if end >= len(lines) {
			problems = append(problems, fmt.Sprintf("%s:%d: Go snippet is not closed", name, start+1))
			continue
		}
		if p := compareSnippet(name, start+2, strings.Join(lines[start+1:end], "\n"), root, m[1], m[2]); p != "" {
			problems = append(problems, p)
		}
	}
	return checked, problems
}

func isGoFence(line string) bool {
	info := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "```"))
	return strings.HasPrefix(strings.TrimSpace(line), "```") && len(info) > 0 && (info[0] == "go" || info[0] == "golang")
}

// exampleName is how messages name example fn of package directory dir
// ("" for the module's root).
func exampleName(dir, fn string) string {
	if dir == "" {
		return fn
	}
	return dir + "." + fn
}

// compareSnippet returns "" when the snippet starting at line first of
// name equals the body of example fn in package directory dir (or, for a
// program, its file's import block and its body), and otherwise a message
// saying where they part and what the copy should be.
func compareSnippet(name string, first int, snippet, root, dir, fn string) string {
	where := fmt.Sprintf("%s:%d: snippet of %s", name, first, exampleName(dir, fn))
	if strings.HasPrefix(strings.TrimSpace(snippet), "package ") {
		return compareProgram(where, name, first, snippet, root, dir, fn)
	}
	body, err := exampleBody(root, dir, fn)
	if err != nil {
		return fmt.Sprintf("%s: %v", where, err)
	}
	return compareBodies(where, name, first, snippet, body)
}

// compareProgram compares a snippet that is a whole program (package
// main, one import block, func main) with example fn and its file's
// import block.
func compareProgram(where, name string, first int, snippet, root, dir, fn string) string {
	imports, body, err := exampleProgram(root, dir, fn)
	if err != nil {
		return fmt.Sprintf("%s: %v", where, err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, snippet, parser.ParseComments)
	if err != nil {
		return fmt.Sprintf("%s: does not parse as a program: %v", where, err)
	}
	var main *ast.FuncDecl
	var gotImports string
	importsLine := 1
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok != token.IMPORT || gotImports != "" {
				return fmt.Sprintf("%s: a program snippet holds one import block and func main, nothing else", where)
			}
			gotImports = snippet[fset.Position(d.Pos()).Offset:fset.Position(d.End()).Offset]
			importsLine = fset.Position(d.Pos()).Line
		case *ast.FuncDecl:
			if d.Name.Name != "main" || d.Recv != nil || main != nil {
				return fmt.Sprintf("%s: a program snippet holds one import block and func main, nothing else", where)
			}
			main = d
		}
	}
	if f.Name.Name != "main" || main == nil || main.Body == nil {
		return fmt.Sprintf("%s: a program snippet is package main with a func main", where)
	}
	if p := compareText(where+" (imports)", name, first+importsLine-1, gotImports, imports, normalizeImports); p != "" {
		return p
	}
	open := fset.Position(main.Body.Lbrace)
	end := fset.Position(main.Body.Rbrace).Offset
	return compareBodies(where, name, first+open.Line, snippet[open.Offset+1:end], body)
}

// compareBodies compares a snippet with an example's body, both gofmted
// and dedented.
func compareBodies(where, name string, first int, snippet, body string) string {
	return compareText(where, name, first, snippet, body, normalize)
}

// compareText returns "" when got and want are equal after norm, and
// otherwise where they part and what got should be.
func compareText(where, name string, first int, got, want string, norm func(string) (string, error)) string {
	want, err := norm(want)
	if err != nil {
		return fmt.Sprintf("%s: the example's source: %v", where, err)
	}
	got, err = norm(got)
	if err != nil {
		return fmt.Sprintf("%s: does not parse: %v", where, err)
	}
	if got == want {
		return ""
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	k := 0
	for k < len(g) && k < len(w) && g[k] == w[k] {
		k++
	}
	line := func(ls []string) string {
		if k < len(ls) {
			return ls[k]
		}
		return "(end of snippet)"
	}
	return fmt.Sprintf("%s differs from the example from its line %d (about %s:%d), after gofmt:\n"+
		"  README:  %s\n  example: %s\nreplace it with the example's:\n%s",
		where, k+1, name, first+k, line(g), line(w), want)
}

// exampleBody returns the source of the body of function fn, declared in a
// _test.go file of dir (relative to root), dedented by one tab: what lies
// between its braces.
func exampleBody(root, dir, fn string) (string, error) {
	_, body, err := findExample(root, dir, fn, false)
	return body, err
}

// exampleProgram returns the import block of the file that declares
// example fn in dir, and fn's body as exampleBody does. It fails unless fn
// is the only declaration of its file besides the imports.
func exampleProgram(root, dir, fn string) (imports, body string, err error) {
	return findExample(root, dir, fn, true)
}

func findExample(root, dir, fn string, alone bool) (imports, body string, err error) {
	if dir == "" {
		dir = "."
	}
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
	if err != nil {
		return "", "", err
	}
	if len(files) == 0 {
		return "", "", fmt.Errorf("no test files in %s/", dir)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return "", "", err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return "", "", err
		}
		var found *ast.FuncDecl
		others := 0
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == fn && d.Body != nil {
					found = d
				} else {
					others++
				}
			case *ast.GenDecl:
				if d.Tok == token.IMPORT {
					imports = string(src[fset.Position(d.Pos()).Offset:fset.Position(d.End()).Offset])
				} else {
					others++
				}
			}
		}
		if found == nil {
			continue
		}
		if alone && others > 0 {
			return "", "", fmt.Errorf("%s: a program snippet needs its example alone in its file, so that the file's imports are the example's own; %s declares %d more", path, path, others)
		}
		open := fset.Position(found.Body.Lbrace).Offset
		end := fset.Position(found.Body.Rbrace).Offset
		return imports, dedent(strings.Trim(string(src[open+1:end]), "\n")) + "\n", nil
	}
	return "", "", fmt.Errorf("no function %s in %s/*_test.go", fn, dir)
}

// normalizeImports gofmts an import declaration.
func normalizeImports(decl string) (string, error) {
	const head = "package p\n\n"
	out, err := format.Source([]byte(head + strings.TrimSpace(decl) + "\n"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(strings.TrimPrefix(string(out), head)), nil
}

// indent adds one leading tab to every non-empty line.
func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteByte('\t')
		}
		b.WriteString(l)
	}
	return b.String()
}

// normalize gofmts a function body and returns it dedented, without
// leading or trailing blank lines.
func normalize(body string) (string, error) {
	const head = "package p\n\nfunc _() {\n"
	out, err := format.Source([]byte(head + body + "\n}\n"))
	if err != nil {
		return "", err
	}
	s := strings.TrimPrefix(string(out), head)
	s = strings.TrimSuffix(s, "}\n")
	return strings.Trim(dedent(s), "\n"), nil
}

// dedent removes one leading tab from every line.
func dedent(s string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b.WriteString(strings.TrimPrefix(sc.Text(), "\t"))
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}
