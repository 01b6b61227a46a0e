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

package istio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// goldenCase is testdata/in/*.yaml: one plan as a case file spells it
// (harness.CasePlan) and the EnvoyFilter context.
type goldenCase struct {
	Context tailcutv1alpha1.IstioContext `json:"context"`
	Plan    harness.CasePlan             `json:"plan"`
}

func loadGolden(t *testing.T, path string) (plan.RoutePlan, tailcutv1alpha1.IstioContext) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gc goldenCase
	if err := yaml.UnmarshalStrict(b, &gc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return gc.Plan.Plan(t, path), gc.Context
}

// ownerOf is the policy as the reconciler hands it to publishers.
// istioPolicy is a policy published to Istio for a Service port.
func istioPolicy(namespace, name, service string, port int32) *tailcutv1alpha1.HedgePolicy {
	return &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Name: service, Port: port},
			Publish:   tailcutv1alpha1.Publish{Target: tailcutv1alpha1.PublishIstio},
		},
	}
}

func ownerOf(policy *tailcutv1alpha1.HedgePolicy) publish.Owner {
	o := publish.Owner{Key: types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}, UID: policy.UID}
	if policy.Spec.Publish.Istio != nil {
		o.IstioContext = string(policy.Spec.Publish.Istio.Context)
	}
	return o
}

// TestEnvoyFilterGolden renders each testdata/in case and compares it with
// testdata/out; -update rewrites the outputs.
func TestEnvoyFilterGolden(t *testing.T) {
	harness.GoldenCases(t, "./controllers/istio", 4, func(t *testing.T, in string) map[string][]byte {
		p, ctx := loadGolden(t, in)
		filter, err := EnvoyFilter(p, ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(filter.Object)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{".yaml": b}
	}, "account-filter.yaml")
}

// testModule stands for the hedge account's module in the golden file: the
// header of an empty WebAssembly module, so that the file stays readable.
// TestIstiodMergesTheHedgeIntoEnvoy runs the real one.
var testModule = []byte("\x00asm\x01\x00\x00\x00")

// TestAccountFilterGolden renders the namespace's hedge account filter;
// TestGoldenFiltersPassServerSideDryRun sends it to the API server with the
// policies' filters.
func TestAccountFilterGolden(t *testing.T) {
	filter, err := AccountFilter("shop", testModule)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(filter.Object)
	if err != nil {
		t.Fatal(err)
	}
	harness.Golden(t, "./controllers/istio", filepath.Join("testdata", "out", "account-filter.yaml"), append([]byte(harness.GoldenHeader("./controllers/istio")), b...))
}

// TestMethodsNotHedgedGetTheirOwnRoute: the MERGE patch lands on every
// routing route of the virtual host, whatever the method, so every other
// method is sent, first, to a route without a hedge. Checked on the rendered
// filter, not the golden file: a POST-hedging filter must not be one -update
// away.
func TestMethodsNotHedgedGetTheirOwnRoute(t *testing.T) {
	p, ctx := loadGolden(t, filepath.Join("testdata", "in", "sidecar-get.yaml"))
	filter, err := EnvoyFilter(p, ctx)
	if err != nil {
		t.Fatal(err)
	}
	patches := filter.Object["spec"].(map[string]any)["configPatches"].([]any)
	if len(patches) != 4 {
		t.Fatalf("%d patches, want the route MERGE, the two INSERT_FIRSTs and the virtual host MERGE", len(patches))
	}
	insert := patches[1].(map[string]any)["patch"].(map[string]any)
	b, err := yaml.Marshal(insert)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"operation: INSERT_FIRST", "invert_match: true", "regex: ^(GET|HEAD)$", "cluster: outbound|8080||api.shop.svc.cluster.local"} {
		if !strings.Contains(s, want) {
			t.Errorf("the inserted route lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "hedge_policy") || strings.Contains(s, "per_try_timeout") {
		t.Errorf("the route for the methods not hedged hedges:\n%s", s)
	}
}

// TestBypassRouteIsInsertedLast: requests with the bypass header, GETs too,
// take a route without a hedge. istiod puts each INSERT_FIRST at the front in
// the order of the patches, so the bypass route's patch comes after the
// unhedged route's and ends up first, ahead of the hedged routes.
// TestIstiodMergesTheHedgeIntoEnvoy checks the order istiod renders.
func TestBypassRouteIsInsertedLast(t *testing.T) {
	p, ctx := loadGolden(t, filepath.Join("testdata", "in", "sidecar-get.yaml"))
	filter, err := EnvoyFilter(p, ctx)
	if err != nil {
		t.Fatal(err)
	}
	patches := filter.Object["spec"].(map[string]any)["configPatches"].([]any)
	var inserts []string
	for _, cp := range patches {
		b, err := yaml.Marshal(cp.(map[string]any)["patch"])
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "operation: INSERT_FIRST") {
			inserts = append(inserts, string(b))
		}
	}
	if len(inserts) != 2 || !strings.Contains(inserts[0], "name: "+UnhedgedRouteName) {
		t.Fatalf("want the unhedged route's INSERT_FIRST, then the bypass route's; got %d:\n%s", len(inserts), strings.Join(inserts, "---\n"))
	}
	s := inserts[1]
	for _, want := range []string{"name: shop/api/bypass", "name: " + plan.BypassHeader, "exact: \"1\"", "cluster: outbound|8080||api.shop.svc.cluster.local",
		"retry_on: connect-failure,refused-stream", "num_retries: 2"} {
		if !strings.Contains(s, want) {
			t.Errorf("the bypass route lacks %q:\n%s", want, s)
		}
	}
	// No account's terms: the account filter leaves its requests alone.
	for _, not := range []string{"hedge_policy", "per_try_timeout", "ratio:", ":method", "metadata"} {
		if strings.Contains(s, not) {
			t.Errorf("the bypass route has %q:\n%s", not, s)
		}
	}
}

// TestPathPrefixIsRefused: a plan for part of the paths cannot be expressed
// as a patch of the Service's routes; it is an error, not a filter that
// hedges every path.
func TestPathPrefixIsRefused(t *testing.T) {
	p, ctx := loadGolden(t, filepath.Join("testdata", "in", "sidecar-get.yaml"))
	p.Match.PathPrefix = "/search"
	if _, err := EnvoyFilter(p, ctx); !errors.Is(err, ErrPathPrefix) {
		t.Errorf("EnvoyFilter with pathPrefix /search: %v, want ErrPathPrefix", err)
	}
}
