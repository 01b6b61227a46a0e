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

package localstack

import (
	"os"
	"os/exec"
	"strings"
)

// ToolVersion is the first line a pinned tool prints about its version, for
// the machine line of a benchmark. bin names the tool's $<BIN>_BIN variable
// (envoy: ENVOY_BIN).
func ToolVersion(bin string, args ...string) string {
	path := os.Getenv(strings.ToUpper(bin) + "_BIN")
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		return bin + " version unknown"
	}
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			// Envoy prints its own path first.
			return bin + " " + strings.TrimSpace(strings.TrimPrefix(line, path))
		}
	}
	return bin + " version unknown"
}
