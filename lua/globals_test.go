package lua_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/redfence/redfence/internal/scripts"
)

// Redis refuses a script that assigns a global, at run time and only on
// the path that does it (a queue member that does not parse, say), and a
// misspelt local reads as a nil global. Compiled, a script shows every
// global it touches: it assigns none and reads only what Redis provides.
func TestScriptsTouchNoStrayGlobal(t *testing.T) {
	provided := []string{"redis", "KEYS", "ARGV", "string", "math", "table", "tonumber", "tostring", "type", "unpack",
		"ipairs", "pairs", "select", "error", "pcall", "next", "assert"}
	sources := map[string]string{"library": strings.SplitN(scripts.LibrarySource(), "\n", 2)[1]}
	for _, name := range []string{"acquire", "release", "extend", "inspect", "abandon", "qacquire", "qraise", "force", "proclaim", "multi"} {
		sources[name] = scripts.Source(name)
	}
	for name, src := range sources {
		chunk, err := parse.Parse(strings.NewReader(src), name)
		require.NoError(t, err, name)
		proto, err := lua.Compile(chunk, name)
		require.NoError(t, err, name)
		var walk func(p *lua.FunctionProto)
		walk = func(p *lua.FunctionProto) {
			for _, inst := range p.Code {
				op, bx := int(inst>>26), int(inst&0x3ffff)
				switch op {
				case lua.OP_SETGLOBAL:
					t.Errorf("%s assigns the global %s", name, p.Constants[bx])
				case lua.OP_GETGLOBAL:
					if g := p.Constants[bx].String(); !slices.Contains(provided, g) {
						t.Errorf("%s reads the global %s", name, g)
					}
				}
			}
			for _, f := range p.FunctionPrototypes {
				walk(f)
			}
		}
		walk(proto)
	}
}
