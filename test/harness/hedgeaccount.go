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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// BuildHedgeAccountModule builds the hedge account's Proxy-Wasm module
// (controllers/envoyconf/hedgeaccount, Rust) into dir with
// hack/hedge-account.sh, as the Dockerfile builds it, and returns its path.
// The go command must run inside the tailcut module (a test's or the
// repository's directory). The script copies the module into place under
// another name first, so that processes building it at once never load half
// a file.
func BuildHedgeAccountModule(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "hedge-account.wasm")
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(gomod)), "go.mod") {
		return "", fmt.Errorf("building the hedge account module: not inside the tailcut module (go env GOMOD: %q, %v)", gomod, err)
	}
	script := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "hack", "hedge-account.sh")
	if b, err := exec.Command(script, "build", out).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the hedge account module (%s build): %v\n%s", script, err, b)
	}
	return out, nil
}

var (
	moduleOnce sync.Once
	modulePath string
	moduleErr  error
)

// HedgeAccountModule returns the hedge account module, built once per test
// process from the current source into one shared temporary directory
// (Cargo's target directory in the cache makes a rebuild cheap).
func HedgeAccountModule(tb testing.TB) string {
	tb.Helper()
	moduleOnce.Do(func() {
		modulePath, moduleErr = BuildHedgeAccountModule(filepath.Join(os.TempDir(), "tailcut-hedge-account"))
	})
	if moduleErr != nil {
		tb.Fatal(moduleErr)
	}
	return modulePath
}
