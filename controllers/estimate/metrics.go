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

package estimate

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// PolicyLabelNames label every per-policy series. policy is
// "<namespace>/<name>", one label to join and select by (the dashboards'
// $policy); policy_namespace and policy_name say the same apart, for routing
// alerts by the policy's namespace. They are not "namespace": a scrape's own
// namespace label (the operator's, set by the ServiceMonitor) would take that
// name.
var PolicyLabelNames = []string{"policy", "policy_namespace", "policy_name"}

// PolicyLabels are the values of PolicyLabelNames for a policy.
func PolicyLabels(namespace, name string) []string {
	return []string{namespace + "/" + name, namespace, name}
}

// Operator metrics, served with controller-runtime's on the metrics endpoint.
var (
	delaySeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_delay_seconds",
		Help: "Hedge delay decided for the policy; 0 when hedging is off.",
	}, PolicyLabelNames)
	estimateErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcut_estimate_errors_total",
		Help: "Evaluations that could not derive a delay, by reason (the DelayDerived reason, or InvalidQuery).",
	}, append(slices.Clone(PolicyLabelNames), "reason"))
	quantileSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_quantile_seconds",
		Help: "The latency quantile tailcut last read for the policy (status.quantile); quantile is which (0.95: the p95), lower_bound is \"true\" while it lies above the delay in force, where hedging hides latency.",
	}, append(slices.Clone(PolicyLabelNames), "quantile", "lower_bound"))
	hedgeRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_rate",
		Help: "Measured extra requests sent by hedging per request on the hedged route, as a ratio (0.05 is 5%): the last reading, as in status.hedgeRate.",
	}, PolicyLabelNames)
	endpointWeights = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_endpoint_weight",
		Help: "Load-balancing weight of an endpoint weighted down on the policy's hedged route, against 100 for the others, because it answers far slower (status.slowEndpoints); no series when none is.",
	}, append(slices.Clone(PolicyLabelNames), "endpoint"))
	samplerMemoryBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tailcut_sampler_memory_bytes",
		Help: "Estimated size of the latency and hedge totals the sampler keeps for the policies of source Envoy; at most 64MiB, beyond which routes' totals are kept further apart (their policies' status.delayReason says so).",
	})
)

func init() {
	metrics.Registry.MustRegister(delaySeconds, estimateErrors, quantileSeconds, hedgeRate, endpointWeights, samplerMemoryBytes)
}

// record exports one evaluation. failed is the reason no delay could be
// derived, empty when one was.
func record(policy *tailcutv1alpha1.HedgePolicy, res Result, failed string) {
	labels := PolicyLabels(policy.Namespace, policy.Name)
	if failed != "" {
		estimateErrors.WithLabelValues(append(labels, failed)...).Inc()
	}
	if failed == tailcutv1alpha1.ReasonInvalidQuery {
		forget(labels[0], false)
		return
	}
	delaySeconds.WithLabelValues(labels...).Set(res.Delay.Seconds())
	if q := res.Quantile; q != nil {
		// One series per policy: a new quantile or bound replaces it.
		quantileSeconds.DeletePartialMatch(prometheus.Labels{"policy": labels[0]})
		quantile := strconv.FormatFloat(q.Quantile, 'g', -1, 64)
		quantileSeconds.WithLabelValues(append(labels, quantile, strconv.FormatBool(q.LowerBound))...).Set(q.Value.Seconds())
	}
	// Like status, the gauges keep the last reading until a new one comes:
	// an evaluation that reads nothing (right after a change) changes nothing.
	if res.HedgeRate != nil {
		hedgeRate.WithLabelValues(labels...).Set(res.HedgeRate.Percent / 100)
	}
	endpointWeights.DeletePartialMatch(prometheus.Labels{"policy": labels[0]})
	for _, s := range res.SlowEndpoints {
		endpointWeights.WithLabelValues(append(labels, s.Address)...).Set(float64(s.Weight))
	}
}

// ForgetPolicy drops a deleted policy's series. The reconciler calls it when the
// policy is gone.
func ForgetPolicy(namespace, name string) {
	forget(PolicyLabels(namespace, name)[0], true)
}

func forget(policy string, errors bool) {
	match := prometheus.Labels{"policy": policy}
	delaySeconds.DeletePartialMatch(match)
	hedgeRate.DeletePartialMatch(match)
	quantileSeconds.DeletePartialMatch(match)
	endpointWeights.DeletePartialMatch(match)
	if errors {
		estimateErrors.DeletePartialMatch(match)
	}
}
