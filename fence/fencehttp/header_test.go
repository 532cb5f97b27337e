package fencehttp

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
)

func TestParse(t *testing.T) {
	ok := []struct {
		lines []string
		want  map[string]fence.Token
	}{
		{nil, map[string]fence.Token{}},
		{[]string{""}, map[string]fence.Token{}},
		{[]string{" , ,"}, map[string]fence.Token{}},
		{[]string{"a=1"}, map[string]fence.Token{"a": 1}},
		{[]string{"orders%2042=7, invoices/7=18446744073709551615"}, map[string]fence.Token{"orders 42": 7, "invoices/7": 18446744073709551615}},
		{[]string{"a=1", "\tb=2 ,"}, map[string]fence.Token{"a": 1, "b": 2}},
		{[]string{"%2c%3D%25=3"}, map[string]fence.Token{",=%": 3}},
		{[]string{"x:y@z~._-=4"}, map[string]fence.Token{"x:y@z~._-": 4}},
	}
	for _, c := range ok {
		got, err := Parse(c.lines)
		require.NoError(t, err, "%q", c.lines)
		require.Equal(t, c.want, got, "%q", c.lines)
	}
	bad := [][]string{
		{"a"}, {"=1"}, {"a=0"}, {"a=01"}, {"a=+1"}, {"a=-1"}, {"a= 1"}, {"a=1x"}, {"a=18446744073709551616"},
		{"a b=1"}, {"a%=1"}, {"a%2=1"}, {"a%zz=1"}, {"a,b=1"}, {"a=1, a=2"}, {"a=1", "a=1"}, {"é=1"},
		{"a=1=2"}, {"a;b=1"}, {`"a"=1`},
		{strings.Repeat("x", MaxResourceLen+1) + "=1"},
	}
	for _, lines := range bad {
		_, err := Parse(lines)
		require.ErrorIs(t, err, ErrMalformed, "%q", lines)
		require.NotContains(t, err.Error(), "\n")
	}
	many := make([]string, MaxTokens+1)
	for i := range many {
		many[i] = "r" + fence.Token(i+1).String() + "=1"
	}
	_, err := Parse([]string{strings.Join(many[:MaxTokens], ",")})
	require.NoError(t, err)
	_, err = Parse([]string{strings.Join(many, ",")})
	require.ErrorIs(t, err, ErrMalformed)
}

func TestFormat(t *testing.T) {
	v, err := Format(map[string]fence.Token{"orders 42": 7, "b,=%": 9, "é": 1})
	require.NoError(t, err)
	require.Equal(t, "b%2C%3D%25=9, orders%2042=7, %C3%A9=1", v)
	got, err := Parse([]string{v})
	require.NoError(t, err)
	require.Equal(t, map[string]fence.Token{"orders 42": 7, "b,=%": 9, "é": 1}, got)

	_, err = Format(map[string]fence.Token{"a": fence.None})
	require.ErrorIs(t, err, fence.ErrNoToken)
	_, err = Format(map[string]fence.Token{"": 1})
	require.Error(t, err)
	_, err = Format(map[string]fence.Token{strings.Repeat("x", MaxResourceLen+1): 1})
	require.Error(t, err)
	many := map[string]fence.Token{}
	for i := range MaxTokens + 1 {
		many[fence.Token(i).String()] = 1
	}
	_, err = Format(many)
	require.Error(t, err)
}

// Whatever Parse accepts, Format writes back to a header that parses to
// the same tokens; whatever it refuses, it refuses with ErrMalformed and a
// one-line message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=1", "orders%2042=7, invoices/7=18446744073709551615", "a=0", "%zz=1", "a=1,a=2", " , ", "%C3%A9=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse([]string{s})
		if err != nil {
			if !errors.Is(err, ErrMalformed) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Parse(%q): %v", s, err)
			}
			return
		}
		v, err := Format(got)
		if err != nil {
			t.Fatalf("Format(Parse(%q)): %v", s, err)
		}
		again, err := Parse([]string{v})
		if err != nil {
			t.Fatalf("Parse(Format(Parse(%q))) = %q: %v", s, v, err)
		}
		require.Equal(t, got, again)
		for r, tok := range got {
			if r == "" || tok == fence.None {
				t.Fatalf("Parse(%q) accepted %q=%d", s, r, tok)
			}
		}
	})
}
