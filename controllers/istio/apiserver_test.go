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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/envtestutil"
)

// startAPIServer runs a real kube-apiserver with Istio's CRDs from the
// istio.io/api module (the version go.mod names) and tailcut's.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	_, c := startAPIServerWith(t, func(*envtest.Environment) {})
	return c
}

// startAPIServerWith is startAPIServer with the environment changed by
// configure first; it returns the environment too (to add users).
func startAPIServerWith(t *testing.T, configure func(*envtest.Environment)) (*envtest.Environment, client.Client) {
	t.Helper()
	crds, err := envtestutil.IstioCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env, cfg, err := envtestutil.StartWith(configure, crds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// TestGoldenFiltersPassServerSideDryRun sends every golden EnvoyFilter to the
// API server as a server-side apply dry run: Istio's CRD schema accepts it.
// The spec also parses, strictly, as Istio's EnvoyFilter proto. A filter with
// an unknown applyTo is the control: the dry run must refuse it.
func TestGoldenFiltersPassServerSideDryRun(t *testing.T) {
	c := startAPIServer(t)
	ctx := context.Background()
	outs, err := filepath.Glob(filepath.Join("testdata", "out", "*.yaml"))
	if err != nil || len(outs) < 4 {
		t.Fatalf("want the golden outputs, found %d (%v)", len(outs), err)
	}
	namespaces := map[string]bool{}
	apply := func(u *unstructured.Unstructured) error {
		if ns := u.GetNamespace(); !namespaces[ns] {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			namespaces[ns] = true
		}
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.DryRunAll, client.ForceOwnership)
	}
	for _, out := range outs {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if err := apply(u); err != nil {
			t.Errorf("%s: the API server refused it: %v", out, err)
		}
		spec, err := json.Marshal(u.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(spec, &networkingv1alpha3.EnvoyFilter{}); err != nil {
			t.Errorf("%s: not an Istio EnvoyFilter spec: %v", out, err)
		}
		// Istio keeps a patch value as a Struct and drops a misspelt field
		// without a word: each value must be a message Envoy's proto knows,
		// the one its applyTo names.
		patches, _, _ := unstructured.NestedSlice(u.Object, "spec", "configPatches")
		for i, cp := range patches {
			value, _, _ := unstructured.NestedMap(cp.(map[string]any), "patch", "value")
			applyTo, _, _ := unstructured.NestedString(cp.(map[string]any), "applyTo")
			var m proto.Message
			switch applyTo {
			case "HTTP_ROUTE":
				m = &routev3.Route{}
			case "VIRTUAL_HOST":
				m = &routev3.VirtualHost{}
			case "HTTP_FILTER":
				m = &hcmv3.HttpFilter{}
			case "CLUSTER":
				m = &clusterv3.Cluster{}
			default:
				t.Errorf("%s: patch %d applies to %q, which this test does not know", out, i, applyTo)
				continue
			}
			b, err := json.Marshal(value)
			if err != nil {
				t.Fatal(err)
			}
			if err := protojson.Unmarshal(b, m); err != nil {
				t.Errorf("%s: patch %d (%s) is not an Envoy %T: %v", out, i, applyTo, m, err)
			}
		}
	}

	bad, err := EnvoyFilter(mustLoad(t, "sidecar-get.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad.Object["spec"].(map[string]any)["configPatches"].([]any)[0].(map[string]any)["applyTo"] = "HTTP_ROUTES"
	if err := apply(bad); err == nil || !strings.Contains(err.Error(), "applyTo") {
		t.Errorf("a filter with applyTo HTTP_ROUTES passed the dry run (%v): the check cannot fail", err)
	}
}

// TestPublisherAppliesUpdatesAndRemoves runs the publisher against the API
// server: the filter is written once per version (nothing when nothing
// changed), updated in place, owned by the policy, and removed.
func TestPublisherAppliesUpdatesAndRemoves(t *testing.T) {
	c := startAPIServer(t)
	ctx := context.Background()
	p, _ := mustLoad(t, "sidecar-get.yaml")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}); err != nil {
		t.Fatal(err)
	}
	policy := istioPolicy(p.Namespace, "api", p.Service, p.Port)
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	pub := &Publisher{Client: c, Reader: c, AccountModule: testModule}
	key := client.ObjectKeyFromObject(policy)
	read := func() *unstructured.Unstructured {
		u := NewEnvoyFilter()
		if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: FilterName("api")}, u); err != nil {
			t.Fatal(err)
		}
		return u
	}

	if err := pub.Publish(ctx, ownerOf(policy), p); err != nil {
		t.Fatal(err)
	}
	first := read()
	if refs := first.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != policy.UID {
		t.Errorf("owner references %+v, want the policy", refs)
	}
	account := NewEnvoyFilter()
	if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: AccountFilterName}, account); err != nil {
		t.Fatalf("the namespace's hedge account filter: %v", err)
	}
	st := pub.Status(key)
	if st.Programmed != 1 || st.Version == "" || st.Version != first.GetAnnotations()[AnnotationVersion] {
		t.Errorf("status %+v, filter version %q", st, first.GetAnnotations()[AnnotationVersion])
	}
	managers := []string{}
	for _, m := range first.GetManagedFields() {
		managers = append(managers, m.Manager+"/"+string(m.Operation))
	}
	if len(managers) != 1 || managers[0] != FieldManager+"/Apply" {
		t.Errorf("managed fields %v, want one server-side apply by %s", managers, FieldManager)
	}

	if err := pub.Publish(ctx, ownerOf(policy), p); err != nil {
		t.Fatal(err)
	}
	if again := read(); again.GetResourceVersion() != first.GetResourceVersion() {
		t.Errorf("the same plan wrote the filter again (resourceVersion %s -> %s)", first.GetResourceVersion(), again.GetResourceVersion())
	}

	p.Hedge.Delay = 40 * time.Millisecond
	if err := pub.Publish(ctx, ownerOf(policy), p); err != nil {
		t.Fatal(err)
	}
	changed := read()
	spec, _ := json.Marshal(changed.Object["spec"])
	if changed.GetUID() != first.GetUID() || !strings.Contains(string(spec), `"per_try_timeout":"0.040s"`) {
		t.Errorf("after a delay change: uid %s (was %s), spec %s", changed.GetUID(), first.GetUID(), spec)
	}
	if pub.Status(key).Version == st.Version {
		t.Errorf("the version did not move with the delay")
	}

	if err := pub.Remove(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := pub.Remove(ctx, key); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(EnvoyFilterGVK.GroupVersion().WithKind("EnvoyFilterList"))
	if err := c.List(ctx, list, client.InNamespace(p.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d EnvoyFilters left after Remove", len(list.Items))
	}
}

// TestPublisherLeavesForeignFiltersAlone: an EnvoyFilter that has the name of
// the policy's filter, or of the namespace's account filter, but is not
// tailcut's is neither taken over nor deleted; Publish says so as an error no
// retry fixes, and writes no policy filter without its account.
func TestPublisherLeavesForeignFiltersAlone(t *testing.T) {
	c := startAPIServer(t)
	ctx := context.Background()
	p, _ := mustLoad(t, "sidecar-get.yaml")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{FilterName("api"), AccountFilterName} {
		foreign := NewEnvoyFilter()
		foreign.SetNamespace(p.Namespace)
		foreign.SetName(name)
		foreign.Object["spec"] = map[string]any{"configPatches": []any{}}
		if err := c.Create(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		policy := istioPolicy(p.Namespace, "api", p.Service, p.Port)
		policy.UID = types.UID(fmt.Sprintf("policy-uid-%d", i))
		pub := &Publisher{Client: c, Reader: c, AccountModule: testModule}
		err := pub.Publish(ctx, ownerOf(policy), p)
		var unpublishable *publish.UnpublishableError
		if !errors.As(err, &unpublishable) || !strings.Contains(err.Error(), "is not tailcut's") {
			t.Fatalf("%s: Publish over a foreign filter: %v, want an UnpublishableError naming it", name, err)
		}
		if name == AccountFilterName {
			if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: FilterName("api")}, NewEnvoyFilter()); !apierrors.IsNotFound(err) {
				t.Errorf("the policy's filter was written without an account: %v", err)
			}
		}
		if err := pub.Remove(ctx, client.ObjectKeyFromObject(policy)); err != nil {
			t.Fatal(err)
		}
		after := NewEnvoyFilter()
		if err := c.Get(ctx, client.ObjectKeyFromObject(foreign), after); err != nil {
			t.Fatalf("%s: the foreign filter is gone: %v", name, err)
		}
		if after.GetResourceVersion() != foreign.GetResourceVersion() || len(after.GetManagedFields()) != 1 {
			t.Errorf("%s: the foreign filter changed: resourceVersion %s -> %s, managed fields %d", name, foreign.GetResourceVersion(), after.GetResourceVersion(), len(after.GetManagedFields()))
		}
		if err := c.Delete(ctx, after); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoliciesShareTheAccountFilter: the policies of a namespace share one
// account filter, owned by each of them; it stays while one of them is
// published to Istio and goes with the last.
func TestPoliciesShareTheAccountFilter(t *testing.T) {
	c := startAPIServer(t)
	ctx := context.Background()
	p, _ := mustLoad(t, "sidecar-get.yaml")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}); err != nil {
		t.Fatal(err)
	}
	pub := &Publisher{Client: c, Reader: c, AccountModule: testModule}
	var policies []*tailcutv1alpha1.HedgePolicy
	for _, name := range []string{"api", "search"} {
		policy := istioPolicy(p.Namespace, name, p.Service, p.Port)
		if err := c.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		rp := p
		rp.Name = p.Namespace + "/" + name
		if err := pub.Publish(ctx, ownerOf(policy), rp); err != nil {
			t.Fatal(err)
		}
		policies = append(policies, policy)
	}
	owners := func() ([]string, bool) {
		u := NewEnvoyFilter()
		err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: AccountFilterName}, u)
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range u.GetOwnerReferences() {
			if o.Controller != nil && *o.Controller {
				t.Errorf("owner %s is the account filter's controller; no policy is", o.Name)
			}
			names = append(names, o.Name)
		}
		return names, true
	}
	if names, ok := owners(); !ok || !slices.Equal(names, []string{"api", "search"}) {
		t.Fatalf("account filter owners %v (exists: %v), want api and search", names, ok)
	}
	if err := pub.Remove(ctx, client.ObjectKeyFromObject(policies[0])); err != nil {
		t.Fatal(err)
	}
	if names, ok := owners(); !ok || !slices.Equal(names, []string{"search"}) {
		t.Fatalf("after api left: owners %v (exists: %v), want search", names, ok)
	}
	if err := pub.Remove(ctx, client.ObjectKeyFromObject(policies[1])); err != nil {
		t.Fatal(err)
	}
	if names, ok := owners(); ok {
		t.Fatalf("after the last policy left the account filter is still there, owned by %v", names)
	}
}

func mustLoad(t *testing.T, name string) (plan.RoutePlan, tailcutv1alpha1.IstioContext) {
	t.Helper()
	return loadGolden(t, filepath.Join("testdata", "in", name))
}
