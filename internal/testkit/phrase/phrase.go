// Package phrase finds what an error message says twice: a chain of
// wrapped errors should say each thing once.
package phrase

import "strings"

// Repeated returns the first run of n words that msg says twice, or "" if
// none. Words are separated by spaces, colons, semicolons and commas, so
// "a: b" and "a b" read alike.
func Repeated(msg string, n int) string {
	words := strings.FieldsFunc(msg, func(r rune) bool { return r == ' ' || r == ':' || r == ';' || r == ',' })
	seen := map[string]bool{}
	for i := 0; i+n <= len(words); i++ {
		p := strings.Join(words[i:i+n], " ")
		if seen[p] {
			return p
		}
		seen[p] = true
	}
	return ""
}
