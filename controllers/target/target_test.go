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

package target

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/envtestutil"
)

func policy(name string, created time.Time, service string, port int32) *tailcutv1alpha1.HedgePolicy {
	return &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: service, Port: port}},
	}
}

func resolver(objs ...client.Object) *Resolver {
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(objs...).
		WithIndex(&tailcutv1alpha1.HedgePolicy{}, NameIndex, func(o client.Object) []string {
			return []string{o.(*tailcutv1alpha1.HedgePolicy).Spec.TargetRef.Name}
		}).Build()
	return &Resolver{Reader: c, HostAliases: map[string][]string{"replica-a.local": {"127.0.0.7"}}}
}

// TestResolve walks one policy through each outcome: no Service, no port,
// an older policy on the port, and the target with its ready endpoints (an
// FQDN address through the host aliases, a not-ready one left out).
func TestResolve(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mine := policy("checkout", t0.Add(time.Minute), "web", 80)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	slice := func(name string, at discoveryv1.AddressType, addr string, ready bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		}
	}
	cases := []struct {
		name      string
		objs      []client.Object
		reason    string
		message   string
		endpoints []plan.Endpoint
	}{
		{"no Service", nil, tailcutv1alpha1.ReasonTargetNotFound, "Service shop/web not found", nil},
		{"no port", []client.Object{&corev1.Service{ObjectMeta: svc.ObjectMeta, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 9090}}}}},
			tailcutv1alpha1.ReasonPortNotFound, "Service shop/web has no port 80", nil},
		{"an older policy holds the port", []client.Object{svc, policy("older", t0, "web", 80), policy("newer", t0.Add(time.Hour), "web", 80), policy("other-port", t0, "web", 81)},
			tailcutv1alpha1.ReasonConflicted, "hedged by the older policy shop/older", nil},
		{"accepted", []client.Object{svc, policy("newer", t0.Add(time.Hour), "web", 80),
			slice("a", discoveryv1.AddressTypeIPv4, "10.0.0.1", true), slice("b", discoveryv1.AddressTypeIPv4, "10.0.0.2", false),
			slice("c", discoveryv1.AddressTypeFQDN, "replica-a.local", true)},
			"", "", []plan.Endpoint{{Address: "10.0.0.1", Port: 8080}, {Address: "127.0.0.7", Port: 8080}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolver(append(tc.objs, mine.DeepCopy())...).Resolve(ctx, mine)
			if err != nil {
				t.Fatal(err)
			}
			if got.Reason != tc.reason || !strings.Contains(got.Message, tc.message) {
				t.Errorf("reason %q (%q), want %q (containing %q)", got.Reason, got.Message, tc.reason, tc.message)
			}
			if len(got.Endpoints) != len(tc.endpoints) {
				t.Fatalf("endpoints %v, want %v", got.Endpoints, tc.endpoints)
			}
			for i := range tc.endpoints {
				if got.Endpoints[i] != tc.endpoints[i] {
					t.Errorf("endpoint %d: %v, want %v", i, got.Endpoints[i], tc.endpoints[i])
				}
			}
			if tc.reason == "" {
				p, err := got.Plan(mine, 20*time.Millisecond, nil)
				if err != nil {
					t.Fatal(err)
				}
				if p.Name != "shop/checkout" || p.Hedge == nil || p.Hedge.Delay != 20*time.Millisecond || len(p.Endpoints) != 2 {
					t.Errorf("plan %s hedge %+v endpoints %v", p.Name, p.Hedge, p.Endpoints)
				}
			}
		})
	}
}
