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

package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The chart carries copies of generated and shared files, because Helm reads
// only files inside the chart. `make chart-crds` refreshes them; this test
// fails when one drifted.
func TestChartCopiesMatchTheirSources(t *testing.T) {
	const fix = "run `make chart-crds` (and commit the result)"

	// crds/ holds exactly the CRDs controller-gen writes to config/crd/bases.
	src, _ := filepath.Glob(repo("config", "crd", "bases", "*.yaml"))
	dst, _ := filepath.Glob(repo("charts", "tailcut", "crds", "*.yaml"))
	if len(src) == 0 {
		t.Fatal("config/crd/bases has no CRDs")
	}
	names := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if !slices.Equal(names(src), names(dst)) {
		t.Errorf("charts/tailcut/crds has %v, config/crd/bases has %v: %s", names(dst), names(src), fix)
	}
	pairs := [][2]string{
		{"config/rbac/role.yaml", "charts/tailcut/files/manager-role.yaml"},
	}
	for _, s := range src {
		pairs = append(pairs, [2]string{"config/crd/bases/" + filepath.Base(s), "charts/tailcut/crds/" + filepath.Base(s)})
	}
	for _, p := range pairs {
		a, err := os.ReadFile(repo(filepath.FromSlash(p[0])))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(repo(filepath.FromSlash(p[1])))
		if err != nil {
			t.Errorf("%s: %v: %s", p[1], err, fix)
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: %s", p[1], p[0], fix)
		}
	}
}

// The chart's operator ClusterRole has exactly the generated rules.
func TestChartClusterRoleHasTheGeneratedRules(t *testing.T) {
	generated := decodeObjects(t, mustRead(t, repo("config", "rbac", "role.yaml")))
	if len(generated) != 1 {
		t.Fatalf("config/rbac/role.yaml has %d objects", len(generated))
	}
	want, _ := generated[0].Object["rules"].([]any)
	for _, r := range byKind(render(t, valueSets[0]), "ClusterRole") {
		if r.GetName() != "tailcut-manager" {
			continue
		}
		got, _ := r.Object["rules"].([]any)
		if !equalJSON(t, got, want) {
			t.Errorf("ClusterRole tailcut-manager rules differ from config/rbac/role.yaml:\n got %v\nwant %v", got, want)
		}
		return
	}
	t.Fatal("the chart renders no ClusterRole tailcut-manager")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
