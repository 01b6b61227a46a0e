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
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files from the code under test, and delete stale ones")

// Updating says whether the test runs with -update.
func Updating() bool { return *update }

// Golden compares got with the golden file at path, failing with the first
// lines that differ. With -update it writes got there instead. pkg names the
// package, for the command that regenerates the file.
func Golden(tb testing.TB, pkg, path string, got []byte) {
	tb.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run 'go test %s -update' to create it)", err, pkg)
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("%s differs from the code's output (run 'go test %s -update' and review the diff):\n%s", path, pkg, lineDiff(string(want), string(got)))
	}
}

// StaleGoldens fails on every file matching pattern that keep rejects: an
// output whose input is gone. With -update it deletes them.
func StaleGoldens(tb testing.TB, pattern string, keep func(path string) bool) {
	tb.Helper()
	outs, err := filepath.Glob(pattern)
	if err != nil {
		tb.Fatal(err)
	}
	for _, out := range outs {
		if keep(out) {
			continue
		}
		if *update {
			if err := os.Remove(out); err != nil {
				tb.Fatal(err)
			}
			tb.Logf("deleted stale %s", out)
			continue
		}
		tb.Errorf("stale golden output %s has no input (run with -update to delete it)", out)
	}
}

// lineDiff shows the first lines that differ, enough to see what changed.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  - %s\n  + %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
