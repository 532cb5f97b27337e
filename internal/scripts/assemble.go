package scripts

import (
	"regexp"
	"strings"
)

// item is one top-level piece of the helper files: a "local function"
// (name set) or any other statement, which is always kept.
type item struct {
	name string
	src  string // comment lines left out
}

var (
	helperStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	identifier  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// assemble returns the source the server runs for a script whose own file
// is body: the helpers it calls, directly or through one another, in their
// order in helpers, then body, every comment line and blank line left out.
//
// Redis runs a script's whole text at every call, so each helper it
// carries is a closure made and dropped per call: a script that carried
// all of lib.lua and queue.lua spent its first ~400 lines on definitions
// it mostly never called. Only full-line comments are dropped, so a "--"
// inside a string is safe.
//
// helpers is a sequence of "local function NAME(" ... "end" blocks (the
// "end" at the start of a line) between comments and blank lines; any
// other top-level statement is kept where it stands, with what it calls.
func assemble(helpers, body string) string {
	var (
		items []item
		cur   *strings.Builder
		name  string
	)
	for line := range strings.Lines(helpers) {
		if isNoise(line) && cur == nil {
			continue
		}
		if cur == nil {
			m := helperStart.FindStringSubmatch(line)
			if m == nil {
				items = append(items, item{src: line})
				continue
			}
			cur, name = &strings.Builder{}, m[1]
		}
		if !isNoise(line) {
			cur.WriteString(line)
		}
		if strings.TrimRight(line, "\r\n") == "end" {
			items = append(items, item{name: name, src: cur.String()})
			cur = nil
		}
	}
	if cur != nil { // an unterminated function: keep it, the server will say
		items = append(items, item{name: name, src: cur.String()})
	}

	body = strip(body)
	need := map[string]bool{}
	var mark func(src string)
	mark = func(src string) {
		for _, id := range identifier.FindAllString(src, -1) {
			for _, it := range items {
				if it.name == id && !need[id] {
					need[id] = true
					mark(it.src)
				}
			}
		}
	}
	mark(body)
	for _, it := range items {
		if it.name == "" {
			mark(it.src)
		}
	}

	var b strings.Builder
	for _, it := range items {
		if it.name == "" || need[it.name] {
			b.WriteString(it.src)
		}
	}
	b.WriteString(body)
	return b.String()
}

// strip drops src's comment lines and blank lines.
func strip(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if !isNoise(line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

func isNoise(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "--")
}
