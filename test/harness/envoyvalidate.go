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
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnvoyValidate runs 'envoy --mode validate' on the config file at path and
// fails the test unless Envoy says it is OK.
func EnvoyValidate(tb testing.TB, bin, path string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--mode", "validate", "-c", path,
		"--disable-hot-restart", "--log-level", "warn").CombinedOutput()
	if err != nil {
		tb.Fatalf("envoy --mode validate -c %s: %v\n%s", path, err, out)
	}
	if !strings.Contains(string(out), "OK") {
		tb.Fatalf("envoy --mode validate -c %s did not say OK:\n%s", path, out)
	}
}
