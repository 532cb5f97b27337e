package redisstore

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// TestScriptsLoad loads every script into a real Redis, which compiles it,
// and checks each file opens with its header comment.
func TestScriptsLoad(t *testing.T) {
	c := testenv.Redis(t)
	for name, src := range map[string]string{"write.lua": writeLua, "get.lua": getLua} {
		if !strings.HasPrefix(src, "-- "+name+":") || !strings.Contains(src, "KEYS[1]") || !strings.Contains(src, "Returns") {
			t.Errorf("%s lacks its header comment (name, KEYS, ARGV, returns)", name)
		}
		sha, err := c.ScriptLoad(t.Context(), recordLua+src).Result()
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s: %v", name, err)
		}
		want := map[string]string{"write.lua": writeScript.Hash(), "get.lua": getScript.Hash()}[name]
		if sha != want {
			t.Errorf("%s: Redis computed SHA %s, the wrapper uses %s", name, sha, want)
		}
	}
}
