package scripts_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
)

// The library is named after its code's SHA1 and registers one function
// per script under that name, so two builds with different code never
// share a name, and it defines each helper once.
func TestLibraryLayout(t *testing.T) {
	name, src := scripts.LibraryName(), scripts.LibrarySource()
	require.Regexp(t, `^redfence_[0-9a-f]{12}$`, name)
	require.True(t, strings.HasPrefix(src, "#!lua name="+name+"\n"))
	for _, s := range []string{"acquire", "release", "extend", "inspect", "abandon", "qacquire", "qraise", "force"} {
		require.Contains(t, src, "function_name='"+name+"_"+s+"'")
	}
	require.Contains(t, src, "function_name='"+name+"_inspect', flags={'no-writes'}")
	require.Len(t, regexp.MustCompile(`(?m)^local function holdOf\(`).FindAllString(src, -1), 1, "each helper once")
	require.NotRegexp(t, `(?m)^\s*--`, src, "no comment lines")
}

// A server without Functions is told apart from one that refuses a call for
// another reason, which must not turn a client to EVALSHA for good.
func TestNoFunctionsErrors(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR unknown command 'FCALL', with args beginning with: ":     true,
		"ERR unknown command `fcall`, with args beginning with: ":     true, // miniredis
		"ERR unknown command 'FUNCTION', with args beginning with: ":  true,
		"NOPERM User u has no permissions to run the 'fcall' command": true,
		"ERR Function not found":                                      false,
		"OOM command not allowed when used memory > 'maxmemory'.":     false,
		"READONLY You can't write against a read only replica.":       false,
		"ERR unknown command 'FOO', with args beginning with: ":       false,
		"FOREIGN rftest:{x}": false,
		"NOPERM User u has no permissions to access one of the keys used as arguments":                                    false,
		"NOPERM User u has no permissions to run the 'publish' command script: redfence_x_release, on @user_function:12.": false,
		"NOPERM User u has no permissions to run the 'function|load' command":                                             true,
	} {
		require.Equal(t, want, scripts.NoFunctions(errors.New(msg)), msg)
	}
}
