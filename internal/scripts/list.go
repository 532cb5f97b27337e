package scripts

import "strings"

// globEscaper escapes the characters a SCAN MATCH pattern gives a meaning.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// unescaper undoes escaper (keys.go). A replacer tries its pairs at each
// position in turn and never looks at what it wrote, so "%257B" becomes
// "%7B", as escaping "%7B" made it.
var unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// LockPattern returns the SCAN MATCH pattern of the lock hashes under
// prefix, P:{*}, with the glob characters of prefix escaped. It matches
// every lock hash (KeysFor's Lock) under the prefix and no other key of a
// lock: queues, counters and floors end in ":q", ":t" and ":f". A key of
// other data may match; NameOf tells them apart.
func LockPattern(prefix string) string { return globEscaper.Replace(prefix) + ":{*}" }

// PrefixPattern is the SCAN MATCH pattern of every key under prefix: a
// walk that looks for locks, read-write locks and semaphores in one pass
// sorts the keys itself.
func PrefixPattern(prefix string) string { return globEscaper.Replace(prefix) + ":*" }

// NameOf returns the lock name whose lock hash under prefix is key, and
// false when no name has that lock hash (KeysFor(prefix, name).Lock ==
// key for the name returned, and for no other).
func NameOf(prefix, key string) (string, bool) {
	tag, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return "", false
	}
	tag, ok = strings.CutSuffix(tag, "}")
	if !ok || tag == "" || strings.ContainsAny(tag, "{}") {
		return "", false
	}
	name := tag
	if strings.Contains(tag, "%") {
		name = unescaper.Replace(tag)
	}
	if escape(name) != tag {
		return "", false // "%7b", or a lone "%": no name escapes to it
	}
	return name, true
}
