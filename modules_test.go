package redfence_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The core module never makes its users download gRPC or the AWS SDK:
// packages fence/fencegrpc and storage/s3store are modules of their own,
// and nothing here requires them.
// GOWORK=off: the committed go.work ties the modules together for
// development, and its build list is not what a user of the core gets.
func TestCoreModuleHasNoGRPC(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	mods := strings.Fields(string(out))
	if len(mods) < 5 {
		t.Fatalf("go list -m all listed almost nothing: %s", out)
	}
	for _, m := range mods {
		if strings.HasPrefix(m, "google.golang.org/grpc") || strings.HasPrefix(m, "github.com/aws/") ||
			m == "github.com/redfence/redfence/fence/fencegrpc" || m == "github.com/redfence/redfence/storage/s3store" {
			t.Errorf("the core module requires %s", m)
		}
	}
}

// No committed go.mod has a replace directive, so that every module can be
// fetched once tagged; go.work ties them together for development instead,
// and uses every one of them.
func TestModulesReadyToTag(t *testing.T) {
	var mods []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(data)) {
			if f := strings.Fields(line); len(f) > 0 && f[0] == "replace" {
				t.Errorf("%s: %q; put the replacement in go.work", path, strings.TrimSpace(line))
			}
		}
		mods = append(mods, filepath.Dir(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("go.work")
	if err != nil {
		t.Fatal(err)
	}
	used, inUse := map[string]bool{}, false
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "use" && len(f) > 1 && f[1] == "(":
			inUse = true
		case f[0] == "use" && len(f) > 1:
			used[filepath.Clean(f[1])] = true
		case inUse && f[0] == ")":
			inUse = false
		case inUse:
			used[filepath.Clean(f[0])] = true
		}
	}
	for _, m := range mods {
		if !used[filepath.Clean(m)] {
			t.Errorf("go.work does not use the module in %s", m)
		}
	}
	if len(mods) < 4 {
		t.Errorf("found %d modules (%v); want the root, fence/fencegrpc, bench and storage/s3store at least", len(mods), mods)
	}
}
