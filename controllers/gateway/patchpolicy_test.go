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

package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/tailcut/tailcut/test/harness"
)

// goldenCase is testdata/in/*.yaml: one plan as a case file spells it, and
// the Gateway API objects the cluster holds.
type goldenCase struct {
	Plan           harness.CasePlan            `json:"plan"`
	GatewayClasses []unstructured.Unstructured `json:"gatewayClasses"`
	Gateways       []unstructured.Unstructured `json:"gateways"`
	HTTPRoutes     []unstructured.Unstructured `json:"httpRoutes"`
}

// goldenOut is testdata/out/*.yaml: what the publisher would write, and why
// it leaves routes alone.
type goldenOut struct {
	Ignored       []string         `json:"ignored,omitempty"`
	PatchPolicies []map[string]any `json:"patchPolicies"`
}

// discover runs the publisher's discovery on a case's objects.
func (gc goldenCase) discover() Routes {
	classes := map[string]string{}
	for _, c := range gc.GatewayClasses {
		classes[c.GetName()], _, _ = unstructured.NestedString(c.Object, "spec", "controllerName")
	}
	gateways := map[types.NamespacedName]Gateway{}
	for _, g := range gc.Gateways {
		if gw, ok := GatewayOf(g, classes); ok {
			gateways[gw.Key] = gw
		}
	}
	p := gc.Plan.RoutePlan
	return Attachments(gc.HTTPRoutes, gateways, p.Namespace, p.Service, p.Port)
}

func loadCase(t *testing.T, path string) goldenCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gc goldenCase
	if err := yaml.UnmarshalStrict(b, &gc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return gc
}

// TestPatchPolicyGolden: discovery and rendering, from the Gateway API
// objects to the EnvoyPatchPolicies. TestGatewayHedgesWithRealEnvoyGateway
// hands the same patches to a real Envoy Gateway.
func TestPatchPolicyGolden(t *testing.T) {
	harness.GoldenCases(t, "./controllers/gateway", 3, func(t *testing.T, in string) map[string][]byte {
		gc := loadCase(t, in)
		p := gc.Plan.Plan(t, in)
		routes := gc.discover()
		out := goldenOut{Ignored: routes.Ignored, PatchPolicies: []map[string]any{}}
		for _, a := range routes.Attachments {
			u, err := PatchPolicy(p, a)
			if err != nil {
				t.Fatal(err)
			}
			out.PatchPolicies = append(out.PatchPolicies, u.Object)
		}
		b, err := yaml.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{".yaml": b}
	}, "account-policy.yaml")
}

// testModule stands for the hedge account's module in the golden file: the
// header of an empty WebAssembly module.
var testModule = []byte("\x00asm\x01\x00\x00\x00")

func TestAccountPolicyGolden(t *testing.T) {
	u, err := AccountPolicy(Gateway{Key: types.NamespacedName{Namespace: "edge", Name: "public"}, Listeners: []string{"http", "https"}}, testModule)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	harness.Golden(t, "./controllers/gateway", filepath.Join("testdata", "out", "account-policy.yaml"), append([]byte(harness.GoldenHeader("./controllers/gateway")), b...))
}

// TestPatchPolicyRefusesWhatRoutesCannotTake: a path prefix (the patch lands
// on whole rules) and an affinity (Envoy Gateway owns the cluster's load
// balancer) are refused, not half applied.
func TestPatchPolicyRefusesWhatRoutesCannotTake(t *testing.T) {
	gc := loadCase(t, filepath.Join("testdata", "in", "get-head.yaml"))
	p := gc.Plan.Plan(t, "get-head")
	a := gc.discover().Attachments[0]
	prefixed := p.DeepCopy()
	prefixed.Match.PathPrefix = "/api"
	if _, err := PatchPolicy(prefixed, a); err != ErrPathPrefix {
		t.Errorf("path prefix /api: %v, want ErrPathPrefix", err)
	}
}

// TestUnhedgedPlanKeepsOnlyTheStatPrefix: an Auto policy starts without a
// hedge, and its first delay comes from the routes' own stats, which the
// stat prefix turns on: the patch keeps it, and nothing else.
func TestUnhedgedPlanKeepsOnlyTheStatPrefix(t *testing.T) {
	gc := loadCase(t, filepath.Join("testdata", "in", "get-head.yaml"))
	p := gc.Plan.Plan(t, "get-head")
	p.Hedge = nil
	u, err := PatchPolicy(p, gc.discover().Attachments[0])
	if err != nil {
		t.Fatal(err)
	}
	patches, _, _ := unstructured.NestedSlice(u.Object, "spec", "jsonPatches")
	if len(patches) != 1 {
		t.Fatalf("%d patches for a plan without a hedge, want the stat prefix alone: %v", len(patches), patches)
	}
	op := patches[0].(map[string]any)["operation"].(map[string]any)
	if op["path"] != "/stat_prefix" || op["value"] != "tailcut_shop_api_8080" {
		t.Errorf("patch %v, want stat_prefix tailcut_shop_api_8080", op)
	}
}

// TestTermsNameTheHedgedMethods: the route serves POST too, so the account's
// terms must carry the methods, or the account would hedge a POST. Checked
// on the rendered policy, not the golden file, so that a POST-hedging patch
// is never one -update away.
func TestTermsNameTheHedgedMethods(t *testing.T) {
	gc := loadCase(t, filepath.Join("testdata", "in", "get-head.yaml"))
	p := gc.Plan.Plan(t, "get-head")
	u, err := PatchPolicy(p, gc.discover().Attachments[0])
	if err != nil {
		t.Fatal(err)
	}
	patches, _, _ := unstructured.NestedSlice(u.Object, "spec", "jsonPatches")
	var terms int
	for _, patch := range patches {
		op := patch.(map[string]any)["operation"].(map[string]any)
		if strings.HasSuffix(op["path"].(string), "/tailcut.hedge_budget") {
			terms++
			if got := op["value"].(map[string]any)["methods"]; got != "GET,HEAD" {
				t.Errorf("terms carry methods %v, want GET,HEAD", got)
			}
		}
	}
	if terms == 0 {
		t.Fatal("no patch sets the account's terms")
	}
}
