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

package verify

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/test/envtestutil"
)

// Against a real API server: --policy fills the Host, the clusters and the
// budget from the policy, and --record leaves an Event that `kubectl describe
// hp` lists (it selects Events by the involved object).
func TestPolicyAndRecordAgainstTheAPIServer(t *testing.T) {
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout-hedge"},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Name: "checkout", Port: 8080},
			Budget:    tailcutv1alpha1.Budget{MaxExtraLoadPercent: 3},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	o := Options{EnvoyAdmin: []string{"http://127.0.0.1:9901"}}
	got, err := fromPolicy(ctx, c, "shop/checkout-hedge", &o)
	if err != nil {
		t.Fatal(err)
	}
	if o.Host != "checkout.shop" || o.HedgedCluster != "tailcut_shop_checkout_8080" || o.UnhedgedCluster != "tailcut_shop_checkout_8080_bypass" ||
		o.BudgetPct == nil || *o.BudgetPct != 3 || o.Policy != "shop/checkout-hedge" {
		t.Errorf("from the policy: host %q, clusters %q %q, budget %v, policy %q", o.Host, o.HedgedCluster, o.UnhedgedCluster, o.BudgetPct, o.Policy)
	}
	if _, err := fromPolicy(ctx, c, "shop/missing", &Options{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing policy: %v", err)
	}

	r := passing()
	r.Reasons = judge(r, DefaultCriteria())
	r.Pass = len(r.Reasons) == 0
	if err := Record(ctx, c, got, r); err != nil {
		t.Fatal(err)
	}
	r.ExtraLoad.Envoy.Pct = 7
	r.Reasons = judge(r, DefaultCriteria())
	r.Pass = false
	if err := Record(ctx, c, got, r); err != nil {
		t.Fatal(err)
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace("shop"), client.MatchingFields{"involvedObject.name": "checkout-hedge"}); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]corev1.Event{}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == "HedgePolicy" && ev.InvolvedObject.UID == got.UID {
			reasons[ev.Reason] = ev
		}
	}
	pass, fail := reasons[ReasonVerifyPassed], reasons[ReasonVerifyFailed]
	if pass.Type != corev1.EventTypeNormal || !strings.HasPrefix(pass.Message, "PASS: hedged p99 37.4ms vs bypass 116.7ms") {
		t.Errorf("the passing run's Event: %s %s %q", pass.Type, pass.Reason, pass.Message)
	}
	if fail.Type != corev1.EventTypeWarning || !strings.Contains(fail.Message, "extra load 7.00% (Envoy's counters) is above the 5% budget") {
		t.Errorf("the failing run's Event: %s %s %q", fail.Type, fail.Reason, fail.Message)
	}
}
