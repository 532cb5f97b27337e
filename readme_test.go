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

// The Go snippets of README.md are copies of runnable examples, so that what
// readers copy compiles and does what it says. Each ```go block is preceded,
// on the line just before its fence, by a marker naming the example whose
// body it copies, as its package directory and function name:
//
//	<!-- example: reentrant.ExampleClient_Do -->
//	<!-- example: storage/redisstore.Example -->
//
// The snippet must equal the example's body, dedented, after gofmt on both.

// readmes are the files whose Go snippets must be examples.
var readmes = []string{"README.md"}

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
	cases := map[string]struct{ text, want string }{
		"edited":          {drifted, `README:  err := locks.Do(ctx, "weekly-report"`},
		"no marker":       {"text\n```go\nx := 1\n```\n", "has no marker"},
		"unknown example": {strings.Replace(good, "ExampleClient_Do", "ExampleClient_Nope", 1), "ExampleClient_Nope"},
		"marker alone":    {"<!-- example: reentrant.ExampleClient_Do -->\n\ntext\n", "not followed by"},
	}
	for name, c := range cases {
		_, problems := checkSnippets(name+".md", c.text, ".")
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", name, problems, c.want)
		}
	}
}

var markerRE = regexp.MustCompile(`^<!--\s*example:\s*([A-Za-z0-9_./-]+)\.(Example\w*)\s*-->$`)

// checkSnippets checks the Go snippets of the Markdown text (file name
// for messages) against the examples under the module root. It returns how
// many marked snippets it checked and what is wrong, one message each.
func checkSnippets(name, text, root string) (checked int, problems []string) {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if m := markerRE.FindStringSubmatch(line); m != nil {
			if i+1 >= len(lines) || !isGoFence(lines[i+1]) {
				problems = append(problems, fmt.Sprintf("%s:%d: marker %s.%s is not followed by a ```go block on the next line", name, i+1, m[1], m[2]))
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

// compareSnippet returns "" when the snippet starting at line first of
// name equals the body of example fn in package directory dir, and
// otherwise a message saying where they part and what the copy should be.
func compareSnippet(name string, first int, snippet, root, dir, fn string) string {
	where := fmt.Sprintf("%s:%d: snippet of %s.%s", name, first, dir, fn)
	body, err := exampleBody(root, dir, fn)
	if err != nil {
		return fmt.Sprintf("%s: %v", where, err)
	}
	want, err := normalize(body)
	if err != nil {
		return fmt.Sprintf("%s: the example's body: %v", where, err)
	}
	got, err := normalize(snippet)
	if err != nil {
		return fmt.Sprintf("%s: does not parse as a function body: %v", where, err)
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
	return fmt.Sprintf("%s differs from the example (in %s/) from its line %d (about %s:%d), after gofmt:\n"+
		"  README:  %s\n  example: %s\nreplace the snippet with the example's body:\n%s",
		where, dir, k+1, name, first+k, line(g), line(w), want)
}

// exampleBody returns the source of the body of function fn, declared in a
// _test.go file of dir (relative to root), dedented by one tab: what lies
// between its braces.
func exampleBody(root, dir, fn string) (string, error) {
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no test files in %s/", dir)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return "", err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			open := fset.Position(fd.Body.Lbrace).Offset
			end := fset.Position(fd.Body.Rbrace).Offset
			return dedent(strings.Trim(string(src[open+1:end]), "\n")) + "\n", nil
		}
	}
	return "", fmt.Errorf("no function %s in %s/*_test.go", fn, dir)
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
