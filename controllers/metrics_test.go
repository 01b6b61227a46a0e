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

package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Each policy's budget, Ready and Hedging reach the metrics as its status
// says them, under its namespace and name, and leave with the policy.
func TestPolicyMetricsFollowTheStatus(t *testing.T) {
	policy := &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "checkout"}}
	policy.Spec.Budget = tailcutv1alpha1.Budget{MaxExtraLoadPercent: 2}
	policy.Spec.TargetRef = tailcutv1alpha1.TargetRef{Name: "checkout", Port: 8080}
	status := &tailcutv1alpha1.HedgePolicyStatus{DelaySource: tailcutv1alpha1.DelaySourcePrometheus,
		Proxies: &tailcutv1alpha1.ProxyCounts{Connected: 2, Programmed: 1}, Conditions: []metav1.Condition{
			{Type: tailcutv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: tailcutv1alpha1.ReasonReady},
			{Type: tailcutv1alpha1.ConditionHedging, Status: metav1.ConditionFalse, Reason: tailcutv1alpha1.ReasonSuspended},
		}}
	recordPolicy(policy, status)
	labels := []string{"shop/checkout", "shop", "checkout"}
	for name, c := range map[string]struct {
		got, want float64
	}{
		"budget":             {testutil.ToFloat64(policyBudget.WithLabelValues(labels...)), 0.02},
		"ready":              {testutil.ToFloat64(policyReady.WithLabelValues(labels...)), 1},
		"hedging":            {testutil.ToFloat64(policyHedging.WithLabelValues(labels...)), 0},
		"connected proxies":  {testutil.ToFloat64(policyProxies.WithLabelValues(append(labels, "connected")...)), 2},
		"programmed proxies": {testutil.ToFloat64(policyProxies.WithLabelValues(append(labels, "programmed")...)), 1},
		"info":               {testutil.ToFloat64(policyInfo.WithLabelValues(append(labels, "XDS", "tailcut_shop_checkout_8080", "", "Prometheus")...)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	// A new source replaces the info series.
	status.DelaySource = tailcutv1alpha1.DelaySourceLastKnown
	recordPolicy(policy, status)
	if n := seriesOf(t, policyInfo, "shop/checkout"); n != 1 {
		t.Errorf("%d info series for one policy, want 1", n)
	}
	forgetPolicy("shop", "checkout")
	for _, c := range []prometheus.Collector{policyBudget, policyReady, policyHedging, policyProxies, policyInfo} {
		if n := seriesOf(t, c, "shop/checkout"); n != 0 {
			t.Errorf("%d series of shop/checkout left after the policy was forgotten", n)
		}
	}
}

// A mesh policy's info series says how its routes' stats are named in the
// sidecars (the dashboards read its mesh_routes), and names no cluster of
// tailcut's proxy.
func TestMeshPolicyInfoNamesItsRouteStats(t *testing.T) {
	policy := &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "backend-hedge"}}
	policy.Spec.TargetRef = tailcutv1alpha1.TargetRef{Name: "backend", Port: 8080}
	policy.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
	recordPolicy(policy, &tailcutv1alpha1.HedgePolicyStatus{DelaySource: tailcutv1alpha1.DelaySourceFallback})
	defer forgetPolicy("demo", "backend-hedge")
	// The name istiod's sidecars give the vhost backend.demo.svc.cluster.local:8080
	// route stats, spelled out by hand (controllers/istio's istiod test reads
	// the real ones through the dashboards).
	got := testutil.ToFloat64(policyInfo.WithLabelValues("demo/backend-hedge", "demo", "backend-hedge", "Istio", "",
		"envoy_vhost_backend_demo_svc_cluster_local_8080_route_", "Fallback"))
	if got != 1 || seriesOf(t, policyInfo, "demo/backend-hedge") != 1 {
		t.Errorf("want one info series with mesh_routes envoy_vhost_backend_demo_svc_cluster_local_8080_route_")
	}
}

// seriesOf counts c's series of one policy (other tests' policies share the
// collectors).
func seriesOf(t *testing.T, c prometheus.Collector, policy string) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1000)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "policy" && l.GetValue() == policy {
				n++
			}
		}
	}
	return n
}
