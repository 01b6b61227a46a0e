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
	"sync"
	"testing"
)

// HedgeAccountPackage is the hedge account's Proxy-Wasm module, which
// tailcut's Envoy loads (xds.TranslateOptions.HedgeAccountModule).
const HedgeAccountPackage = "github.com/tailcut/tailcut/controllers/envoyconf/hedgeaccount"

// BuildHedgeAccountModule builds the hedge account module into dir, as the
// Dockerfile does, and returns its path. The go command must run inside the
// tailcut module (a test's or the repository's directory). The module is
// written under another name and renamed into place, so that processes
// building it at once never load half a file.
func BuildHedgeAccountModule(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "hedge-account.wasm")
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-ldflags=-s -w", "-o", tmp, HedgeAccountPackage)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the hedge account module (GOOS=wasip1 GOARCH=wasm go build %s): %v\n%s", HedgeAccountPackage, err, b)
	}
	return out, os.Rename(tmp, out)
}

var (
	moduleOnce sync.Once
	modulePath string
	moduleErr  error
)

// HedgeAccountModule returns the hedge account module, built once per test
// process from the current source into one shared temporary directory (Go's
// build cache makes a rebuild cheap).
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
