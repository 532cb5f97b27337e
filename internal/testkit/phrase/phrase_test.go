package phrase

import "testing"

func TestRepeated(t *testing.T) {
	for _, c := range []struct {
		msg  string
		n    int
		want string
	}{
		{"lease lost: no renewal confirmed in time: token 5: no renewal confirmed in time", 4, "no renewal confirmed in"},
		{"lease lost: no renewal confirmed in time: token 5: the TTL less the 300ms safety margin passed", 4, ""},
		{"a b c a b d", 3, ""},
		{"a b c: a b c", 3, "a b c"},
		{"", 4, ""},
	} {
		if got := Repeated(c.msg, c.n); got != c.want {
			t.Errorf("Repeated(%q, %d) = %q, want %q", c.msg, c.n, got, c.want)
		}
	}
}
