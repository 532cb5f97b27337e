package fencehttp

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redfence/redfence/fence"
)

// The header names of the wire format (see the package documentation).
const (
	// Header carries a request's tokens: resource=token, comma-separated,
	// on one line or several.
	Header = "Fencing-Token"
	// HighestHeader carries, on a 409 refusal, the highest token the
	// service's store had accepted for the resource: resource=token.
	HighestHeader = "Fencing-Token-Highest"
)

const (
	// MaxTokens is the most tokens one request may carry.
	MaxTokens = 64
	// MaxResourceLen is the longest resource name accepted, in bytes,
	// decoded.
	MaxResourceLen = 1024
)

// ErrMalformed reports a Fencing-Token header that does not follow the wire
// format; a server answers it with 400 Bad Request.
var ErrMalformed = errors.New("fencehttp: malformed Fencing-Token header")

// unescaped reports whether b goes on the wire as itself in a resource:
// RFC 3986's unreserved characters and ":", "/" and "@", common in lock
// names and with no meaning in the header.
func unescaped(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-._~:/@", b) >= 0
}

// encodeResource percent-encodes every byte of r but the unescaped ones,
// with upper-case hex digits.
func encodeResource(r string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		if unescaped(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// decodeResource undoes encodeResource; it accepts either case of hex
// digits, and refuses any other byte than the unescaped ones and %XX.
func decodeResource(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case unescaped(c):
			b.WriteByte(c)
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("truncated escape %q", s[i:])
			}
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("bad escape %q", s[i:i+3])
			}
			b.WriteByte(byte(hi<<4 | lo))
			i += 2
		default:
			return "", fmt.Errorf("character %q must be percent-encoded", c)
		}
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseToken reads a token: decimal digits, no sign, no leading zero, not
// zero, at most 2^64-1.
func parseToken(s string) (fence.Token, error) {
	if s == "" || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return fence.None, fmt.Errorf("token %q is not a positive decimal without leading zeros", s)
	}
	t, err := fence.Parse(s)
	if err != nil {
		return fence.None, fmt.Errorf("token %q does not fit 64 bits", s)
	}
	return t, nil
}

// Format returns the value of a Fencing-Token header that carries tokens,
// resources in byte order. It refuses an empty resource or one longer than
// MaxResourceLen, a None token (an error wrapping fence.ErrNoToken), and
// more than MaxTokens tokens.
func Format(tokens map[string]fence.Token) (string, error) {
	if len(tokens) > MaxTokens {
		return "", fmt.Errorf("fencehttp: %d tokens, at most %d go in one request", len(tokens), MaxTokens)
	}
	resources := make([]string, 0, len(tokens))
	for r, t := range tokens {
		switch {
		case r == "":
			return "", errors.New("fencehttp: empty resource name")
		case len(r) > MaxResourceLen:
			return "", fmt.Errorf("fencehttp: resource name of %d bytes, at most %d", len(r), MaxResourceLen)
		case t == fence.None:
			return "", fmt.Errorf("fencehttp: resource %q: %w", r, fence.ErrNoToken)
		}
		resources = append(resources, r)
	}
	slices.Sort(resources)
	parts := make([]string, len(resources))
	for i, r := range resources {
		parts[i] = encodeResource(r) + "=" + tokens[r].String()
	}
	return strings.Join(parts, ", "), nil
}

// Parse reads the tokens of a request's Fencing-Token header lines (all of
// them, as http.Header.Values returns them). No line, or only empty list
// elements, is no token: an empty map and no error. Anything else that is
// not the wire format is an error wrapping ErrMalformed that says what: a
// missing "=", a bad escape, a zero, signed, leading-zero or overflowing
// token, a resource given twice, an empty or over-long resource, more than
// MaxTokens tokens.
func Parse(lines []string) (map[string]fence.Token, error) {
	out := map[string]fence.Token{}
	for _, line := range lines {
		for elem := range strings.SplitSeq(line, ",") {
			elem = strings.Trim(elem, " \t")
			if elem == "" {
				continue // an empty list element, which HTTP's list syntax allows
			}
			if err := parseElem(out, elem); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
		}
	}
	return out, nil
}

func parseElem(out map[string]fence.Token, elem string) error {
	enc, tok, ok := strings.Cut(elem, "=")
	if !ok {
		return fmt.Errorf("%q is not resource=token", elem)
	}
	r, err := decodeResource(enc)
	switch {
	case err != nil:
		return fmt.Errorf("resource %q: %v", enc, err)
	case r == "":
		return errors.New("empty resource name")
	case len(r) > MaxResourceLen:
		return fmt.Errorf("resource name of %d bytes, at most %d", len(r), MaxResourceLen)
	}
	t, err := parseToken(tok)
	if err != nil {
		return fmt.Errorf("resource %q: %v", r, err)
	}
	if _, dup := out[r]; dup {
		return fmt.Errorf("resource %q given twice", r)
	}
	if len(out) == MaxTokens {
		return fmt.Errorf("more than %d tokens", MaxTokens)
	}
	out[r] = t
	return nil
}
