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
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/plan"
)

// Each policy's budget and state, as the status the reconciler writes says
// them, labelled as the estimator's series are (estimate.PolicyLabelNames), so
// that alerts compare a policy's hedge rate with its own budget and route by
// the policy's namespace.
var (
	policyBudget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_policy_budget_ratio",
		Help: "The policy's extra-load budget as a ratio (spec.budget.maxExtraLoadPercent / 100), the bound for tailcut_hedge_rate.",
	}, estimate.PolicyLabelNames)
	policyReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_policy_ready",
		Help: "1 when the policy's Ready condition is True (accepted and programmed as intended), else 0.",
	}, estimate.PolicyLabelNames)
	policyHedging = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_policy_hedging",
		Help: "1 when the policy's Hedging condition is True (hedges are being sent), else 0; the condition's reason says why not.",
	}, estimate.PolicyLabelNames)
	policyProxies = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_policy_proxies",
		Help: "Proxies that should run the policy (state connected) and those that acknowledged its current version (state programmed), as status.proxies.",
	}, append(slices.Clone(estimate.PolicyLabelNames), "state"))
	policyInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_policy_info",
		Help: "1 for each policy: its data plane (publish.target), the Envoy cluster of its hedged route on tailcut's proxy (cluster; empty on a mesh), how the names of its routes' stats begin on a mesh's sidecars (mesh_routes; empty on tailcut's proxy) and where its delay comes from now (source, status.delaySource).",
	}, append(slices.Clone(estimate.PolicyLabelNames), "data_plane", "cluster", "mesh_routes", "source"))
)

func init() {
	metrics.Registry.MustRegister(policyBudget, policyReady, policyHedging, policyProxies, policyInfo)
}

// recordPolicy exports the policy's budget and the Ready and Hedging
// conditions of the status about to be written.
func recordPolicy(policy *tailcutv1alpha1.HedgePolicy, status *tailcutv1alpha1.HedgePolicyStatus) {
	labels := estimate.PolicyLabels(policy.Namespace, policy.Name)
	policyBudget.WithLabelValues(labels...).Set(float64(policy.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100)
	policyReady.WithLabelValues(labels...).Set(boolGauge(apimeta.IsStatusConditionTrue(status.Conditions, tailcutv1alpha1.ConditionReady)))
	policyHedging.WithLabelValues(labels...).Set(boolGauge(apimeta.IsStatusConditionTrue(status.Conditions, tailcutv1alpha1.ConditionHedging)))
	var connected, programmed float64
	if p := status.Proxies; p != nil {
		connected, programmed = float64(p.Connected), float64(p.Programmed)
	}
	policyProxies.WithLabelValues(append(labels, "connected")...).Set(connected)
	policyProxies.WithLabelValues(append(labels, "programmed")...).Set(programmed)
	target := policy.Spec.EffectivePublishTarget()
	ns, svc, port := policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port
	cluster, meshRoutes := "", ""
	switch target {
	case tailcutv1alpha1.PublishXDS:
		cluster = plan.ClusterName(ns, svc, port)
	case tailcutv1alpha1.PublishIstio:
		meshRoutes = plan.MeshRoutesMetricPrefix(plan.MeshVirtualHost(ns, svc, port))
	}
	// One series per policy: the labels that change (source) replace it.
	policyInfo.DeletePartialMatch(prometheus.Labels{"policy": labels[0]})
	policyInfo.WithLabelValues(append(labels, string(target), cluster, meshRoutes, string(status.DelaySource))...).Set(1)
}

// forgetPolicy drops a deleted policy's series, the estimator's too.
func forgetPolicy(namespace, name string) {
	labels := estimate.PolicyLabels(namespace, name)
	policyBudget.DeleteLabelValues(labels...)
	policyReady.DeleteLabelValues(labels...)
	policyHedging.DeleteLabelValues(labels...)
	match := prometheus.Labels{"policy": labels[0]}
	policyProxies.DeletePartialMatch(match)
	policyInfo.DeletePartialMatch(match)
	estimate.ForgetPolicy(namespace, name)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
