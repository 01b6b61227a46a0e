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
	"os"
	"testing"
)

// Binary returns the path in the environment variable env, of a real
// program the test runs. A test that needs it fails without it, never skips:
// the Makefile sets every such variable from hack/tools.sh.
func Binary(tb testing.TB, env, tool string) string {
	tb.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		tb.Fatalf("%s is not set: this test runs the real %s. Run it through make, or export %s=$(hack/tools.sh %s | tail -1)", env, tool, env, tool)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		tb.Fatalf("%s=%s is not an executable file (%v)", env, bin, err)
	}
	return bin
}

// EnvoyBin is $ENVOY_BIN, the Envoy the tests run.
func EnvoyBin(tb testing.TB) string { return Binary(tb, "ENVOY_BIN", "envoy") }
