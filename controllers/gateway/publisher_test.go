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
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// TestPublisherFollowsTheRoutesAndLeavesNothing, on a real API server with
// Envoy Gateway's CRDs (which validate every patch policy written): a policy
// whose Service is routed through a Gateway in its own namespace and one in
// an infrastructure namespace gets a patch on each (owned by the policy only
// in its own namespace: an owner reference cannot cross namespaces) and an
// account patch on each Gateway. When the HTTPRoute moves to another
// Gateway, the old Gateway's patch and account go, and the new one's come.
// A second policy keeps a shared Gateway's account while it patches it. (The
// first version named the account after the namespace: a second Gateway of
// the namespace took it over, and releasing the first deleted it.)
// Remove leaves nothing of the policy's.
func TestPublisherFollowsTheRoutesAndLeavesNothing(t *testing.T) {
	crds, err := envtestutil.EnvoyGatewayCRDs(harness.Binary(t, "ENVOY_GATEWAY_BIN", "envoy-gateway"))
	if err != nil {
		t.Fatal(err)
	}
	env, cfg, err := envtestutil.Start(crds...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"shop", "infra"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(doc string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	create(`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"GatewayClass","metadata":{"name":"eg"},"spec":{"controllerName":"` + ControllerName + `"}}`)
	for _, gw := range []string{"infra/a", "infra/b", "shop/local"} {
		ns, name, _ := strings.Cut(gw, "/")
		create(fmt.Sprintf(`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"Gateway","metadata":{"name":%q,"namespace":%q},
			"spec":{"gatewayClassName":"eg","listeners":[{"name":"http","protocol":"HTTP","port":8080}]}}`, name, ns))
	}
	route := func(name, service string, parents ...string) string {
		var refs []string
		for _, p := range parents {
			ns, gw, _ := strings.Cut(p, "/")
			refs = append(refs, fmt.Sprintf(`{"name":%q,"namespace":%q}`, gw, ns))
		}
		return fmt.Sprintf(`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":%q,"namespace":"shop"},
			"spec":{"parentRefs":[%s],"rules":[{"backendRefs":[{"name":%q,"port":8080}]}]}}`, name, strings.Join(refs, ","), service)
	}
	api := create(route("api", "api", "infra/a", "shop/local"))
	create(route("web", "web", "shop/local"))

	pub := &Publisher{Client: c, Reader: c, AccountModule: testModule}
	owners := map[string]publish.Owner{}
	for _, name := range []string{"api", "web"} {
		hp := &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: name, Port: 8080},
				Publish: tailcutv1alpha1.Publish{Target: tailcutv1alpha1.PublishEnvoyGateway}}}
		if err := c.Create(ctx, hp); err != nil {
			t.Fatal(err)
		}
		owners[name] = publish.Owner{Key: client.ObjectKeyFromObject(hp), UID: hp.UID}
	}
	publishPlan := func(name string) {
		t.Helper()
		p, err := plan.Build(plan.Input{PolicyNamespace: "shop", PolicyName: name, Service: name, Port: 8080, PathPrefix: "/",
			Methods: []string{"GET"}, Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"reset"}, BudgetPercent: 5, MinConcurrency: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, owners[name], p); err != nil {
			t.Fatal(err)
		}
	}
	publishPlan("api")
	publishPlan("web")
	want := func(step string, patches map[string]string) {
		t.Helper()
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(PatchPolicyGVK.GroupVersion().WithKind("EnvoyPatchPolicyList"))
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, u := range l.Items {
			owner := "-"
			if refs := u.GetOwnerReferences(); len(refs) > 0 {
				owner = refs[0].Name
			}
			got[u.GetNamespace()+"/"+u.GetName()] = owner
		}
		if fmt.Sprint(got) != fmt.Sprint(patches) {
			t.Errorf("%s: patch policies (name: owner) %v, want %v", step, got, patches)
		}
	}
	want("both published", map[string]string{
		"infra/tailcut-api.shop.a": "-", "infra/" + AccountPolicyName("a"): "-",
		"shop/tailcut-api.shop.local": "api", "shop/tailcut-web.shop.local": "web", "shop/" + AccountPolicyName("local"): "-",
	})

	if err := unstructured.SetNestedSlice(api.Object, []any{map[string]any{"name": "b", "namespace": "infra"}}, "spec", "parentRefs"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, api); err != nil {
		t.Fatal(err)
	}
	publishPlan("api")
	want("api's route moved to infra/b", map[string]string{
		"infra/tailcut-api.shop.b": "-", "infra/" + AccountPolicyName("b"): "-",
		"shop/tailcut-web.shop.local": "web", "shop/" + AccountPolicyName("local"): "-",
	})
	if s := pub.Status(owners["api"].Key); s.Programmed != 1 || !strings.Contains(s.Detail, "tailcut-api.shop.b") {
		t.Errorf("status after the move: %+v", s)
	}

	if err := pub.Remove(ctx, owners["api"].Key); err != nil {
		t.Fatal(err)
	}
	want("api removed", map[string]string{"shop/tailcut-web.shop.local": "web", "shop/" + AccountPolicyName("local"): "-"})
	if err := pub.Remove(ctx, owners["web"].Key); err != nil {
		t.Fatal(err)
	}
	want("both removed", map[string]string{})

	// A Service no HTTPRoute sends to cannot be published, and says why.
	p, err := plan.Build(plan.Input{PolicyNamespace: "shop", PolicyName: "api", Service: "orphan", Port: 8080, PathPrefix: "/",
		Methods: []string{"GET"}, Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"reset"}, BudgetPercent: 5, MinConcurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(ctx, owners["api"], p)
	if unpublishable := new(publish.UnpublishableError); !errors.As(err, &unpublishable) {
		t.Errorf("publishing for a Service no HTTPRoute sends to: %v, want an UnpublishableError", err)
	}
	want("nothing routes to the Service", map[string]string{})
}
