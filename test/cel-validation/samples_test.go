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

package celvalidation

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tailcut/tailcut/test/envtestutil"
)

// kubectl runs the pinned kubectl (from KUBEBUILDER_ASSETS) against the test API
// server, the way a user applies a policy.
func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl not found in KUBEBUILDER_ASSETS (run via `make test`): %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := envtestutil.WriteKubeconfig(testEnv, "admin", path); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", path}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestSamplesApplyWithKubectl(t *testing.T) {
	out, err := kubectl(t, "", "apply", "-n", "default", "-k", filepath.Join(envtestutil.RepoRoot(), "config", "samples"))
	if err != nil {
		t.Fatalf("kubectl apply -k config/samples: %v\n%s", err, out)
	}
	for _, name := range []string{"hedgepolicy.tailcut.io/checkout created", "hedgepolicy.tailcut.io/catalog-static created", "hedgepolicy.tailcut.io/sessions-affinity created", "hedgepolicy.tailcut.io/search-fanout created", "hedgepolicy.tailcut.io/storefront-edge created"} {
		if !strings.Contains(out, name) {
			t.Errorf("kubectl output lacks %q:\n%s", name, out)
		}
	}
	out, err = kubectl(t, "", "get", "hp", "-n", "default", "checkout", "catalog-static")
	if err != nil {
		t.Fatalf("kubectl get hp: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if want := []string{"NAME", "TARGET", "DELAY", "SOURCE", "HEDGE%", "BUDGET%", "READY", "REASON", "AGE"}; !slices.Equal(header, want) {
		t.Errorf("kubectl get hp columns are %v, want %v:\n%s", header, want, out)
	}
	for _, name := range []string{"checkout", "catalog"} {
		if !strings.Contains(out, name) {
			t.Errorf("kubectl get hp output lacks %q:\n%s", name, out)
		}
	}
	out, err = kubectl(t, "", "get", "hp", "-n", "default", "checkout", "-o", "wide")
	if err != nil {
		t.Fatalf("kubectl get hp -o wide: %v\n%s", err, out)
	}
	for _, col := range []string{"PORT", "MODE", "PROXIES"} {
		if !slices.Contains(strings.Fields(strings.SplitN(out, "\n", 2)[0]), col) {
			t.Errorf("kubectl get hp -o wide lacks column %q:\n%s", col, out)
		}
	}
	out, err = kubectl(t, "", "explain", "hedgepolicy.spec.delay.auto.quantile")
	if err != nil || !strings.Contains(out, "Quantile of the latency distribution") {
		t.Errorf("kubectl explain does not show the field's doc: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "delete", "-n", "default", "-k", filepath.Join(envtestutil.RepoRoot(), "config", "samples")); err != nil {
		t.Errorf("kubectl delete: %v\n%s", err, out)
	}
}

func TestInvalidPolicyIsRejectedNamingTheField(t *testing.T) {
	invalid := `apiVersion: tailcut.io/v1alpha1
kind: HedgePolicy
metadata:
  name: invalid
  namespace: default
spec:
  targetRef: {name: checkout, port: 8080}
  match: {methods: [GET, POST]}
`
	out, err := kubectl(t, invalid, "apply", "-f", "-")
	if err == nil {
		t.Fatalf("kubectl accepted a POST policy without allowNonIdempotent:\n%s", out)
	}
	if !strings.Contains(out, "spec.match.methods") || !strings.Contains(out, "allowNonIdempotent") {
		t.Errorf("rejection does not name the field and the fix:\n%s", out)
	}
}
