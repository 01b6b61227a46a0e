/*
Copyright 2026 The tailcut Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHedgeAccountModuleIsBuiltFromItsOwnCheckout: a second checkout whose
// account differs (a scratch worktree of another commit, for an A/B) must get
// a module built from its own sources. With one Cargo target directory for
// every checkout, Cargo judged the module fresh by the first checkout's
// sources and handed the second one the same bytes, so an A/B compared a
// change with itself.
func TestHedgeAccountModuleIsBuiltFromItsOwnCheckout(t *testing.T) {
	root := repoRoot(t)
	mine := buildModule(t, filepath.Join(root, "hack", "hedge-account.sh"))

	other := t.TempDir()
	for _, dir := range []string{"hack", "controllers/envoyconf/hedgeaccount"} {
		parent := filepath.Join(other, filepath.Dir(dir))
		if err := os.MkdirAll(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", filepath.Join(root, dir), parent).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v\n%s", dir, err, out)
		}
	}
	src := filepath.Join(other, "controllers/envoyconf/hedgeaccount/src/account.rs")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "const BAND_SECONDS: i64 = 10;", "const BAND_SECONDS: i64 = 11;"
	if !bytes.Contains(b, []byte(from)) {
		t.Fatalf("%s no longer holds %q; pick another constant to change", src, from)
	}
	if err := os.WriteFile(src, bytes.Replace(b, []byte(from), []byte(to), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	theirs := buildModule(t, filepath.Join(other, "hack", "hedge-account.sh"))
	if bytes.Equal(mine, theirs) {
		t.Fatalf("a checkout whose account differs got the same module (%d bytes): it was not built from its own sources", len(mine))
	}
	if again := buildModule(t, filepath.Join(root, "hack", "hedge-account.sh")); !bytes.Equal(mine, again) {
		t.Errorf("building the other checkout changed this checkout's module")
	}
}

// buildModule runs script build and returns the module's bytes. The other
// checkout's Cargo target directory (three levels above the module) is
// removed with its temporary directory.
func buildModule(t *testing.T, script string) []byte {
	t.Helper()
	out, err := exec.Command(script, "build").Output()
	if err != nil {
		t.Fatalf("%s build: %v", script, err)
	}
	path := strings.TrimSpace(string(out))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script, repoRoot(t)) {
		// Only a checkout's own directory below cargo-target, never the
		// directory every checkout would share without the fix.
		if target := filepath.Dir(filepath.Dir(filepath.Dir(path))); filepath.Base(filepath.Dir(target)) == "cargo-target" {
			t.Cleanup(func() { _ = os.RemoveAll(target) })
		}
	}
	return b
}

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod)))
}
