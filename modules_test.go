package redfence_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core module never makes its users download gRPC: package
// fence/fencegrpc is a module of its own, and nothing here requires it.
func TestCoreModuleHasNoGRPC(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "all").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	mods := strings.Fields(string(out))
	if len(mods) < 5 {
		t.Fatalf("go list -m all listed almost nothing: %s", out)
	}
	for _, m := range mods {
		if strings.HasPrefix(m, "google.golang.org/grpc") || m == "github.com/redfence/redfence/fence/fencegrpc" {
			t.Errorf("the core module requires %s", m)
		}
	}
}
