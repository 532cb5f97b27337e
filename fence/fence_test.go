package fence_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/redfence/redfence/fence"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		highest, tok fence.Token
		want         error
	}{
		{0, 1, nil},
		{5, 5, nil},
		{5, 6, nil},
		{5, 4, fence.ErrStale},
		{0, 0, fence.ErrNoToken},
		{7, 0, fence.ErrNoToken},
		{math.MaxUint64, math.MaxUint64, nil},
		{math.MaxUint64, math.MaxUint64 - 1, fence.ErrStale},
	}
	for _, c := range cases {
		err := fence.Check(c.highest, c.tok)
		if c.want == nil {
			if err != nil {
				t.Errorf("Check(%d, %d) = %v, want nil", c.highest, c.tok, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("Check(%d, %d) = %v, want %v", c.highest, c.tok, err, c.want)
		}
	}
}

func TestStaleErrorCarriesTokens(t *testing.T) {
	err := fence.Check(9, 3)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Token != 3 || se.Highest != 9 {
		t.Fatalf("Check(9, 3) = %#v, want *StaleError{3, 9}", err)
	}
	wrapped := fmt.Errorf("store: %w", err)
	if !errors.Is(wrapped, fence.ErrStale) || errors.Is(wrapped, fence.ErrNoToken) {
		t.Fatalf("wrapped stale error matches wrong sentinels: %v", wrapped)
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"1", "18446744073709551615", "0"} {
		tok, err := fence.Parse(s)
		if err != nil || tok.String() != s {
			t.Errorf("Parse(%q) = %v, %v", s, tok, err)
		}
	}
	for _, s := range []string{"", "-1", "+1", "1.5", "18446744073709551616", " 1", "x"} {
		if _, err := fence.Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "0", "18446744073709551615", "-3", "abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.Parse(s)
		if err != nil {
			return
		}
		again, err := fence.Parse(tok.String())
		if err != nil || again != tok {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
