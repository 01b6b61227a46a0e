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
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Operator metrics, served with controller-runtime's on the metrics endpoint.
// The policy label is "<namespace>/<name>".
var (
	delaySeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_delay_seconds",
		Help: "Hedge delay decided for the policy; 0 when hedging is off.",
	}, []string{"policy"})
	estimateErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tailcut_estimate_errors_total",
		Help: "Evaluations that could not derive a delay, by reason (the DelayDerived reason, or InvalidQuery).",
	}, []string{"policy", "reason"})
	quantileSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_quantile_seconds",
		Help: "The latency quantile tailcut last read for the policy (status.quantile); lower_bound is \"true\" while it lies above the delay in force, where hedging hides latency.",
	}, []string{"policy", "lower_bound"})
	hedgeRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tailcut_hedge_rate",
		Help: "Measured extra requests sent by hedging per request on the hedged route, as a ratio (0.05 is 5%): the last reading, as in status.hedgeRate.",
	}, []string{"policy"})
	samplerMemoryBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tailcut_sampler_memory_bytes",
		Help: "Estimated size of the latency and hedge totals the sampler keeps for the policies of source Envoy; at most 64MiB, beyond which routes' totals are kept further apart (their policies' status.delayReason says so).",
	})
)

func init() {
	metrics.Registry.MustRegister(delaySeconds, estimateErrors, quantileSeconds, hedgeRate, samplerMemoryBytes)
}

func policyLabel(policy *tailcutv1alpha1.HedgePolicy) string {
	return policy.Namespace + "/" + policy.Name
}

// record exports one evaluation. failed is the reason no delay could be
// derived, empty when one was.
func record(policy *tailcutv1alpha1.HedgePolicy, res Result, failed string) {
	key := policyLabel(policy)
	if failed != "" {
		estimateErrors.WithLabelValues(key, failed).Inc()
	}
	if failed == tailcutv1alpha1.ReasonInvalidQuery {
		delaySeconds.DeleteLabelValues(key)
		hedgeRate.DeleteLabelValues(key)
		quantileSeconds.DeletePartialMatch(prometheus.Labels{"policy": key})
		return
	}
	delaySeconds.WithLabelValues(key).Set(res.Delay.Seconds())
	if q := res.Quantile; q != nil {
		lower := strconv.FormatBool(q.LowerBound)
		quantileSeconds.DeleteLabelValues(key, strconv.FormatBool(!q.LowerBound))
		quantileSeconds.WithLabelValues(key, lower).Set(q.Value.Seconds())
	}
	// Like status, the gauges keep the last reading until a new one comes:
	// an evaluation that reads nothing (right after a change) changes nothing.
	if res.HedgeRate != nil {
		hedgeRate.WithLabelValues(key).Set(res.HedgeRate.Percent / 100)
	}
}

// ForgetPolicy drops a deleted policy's series. The reconciler calls it when the
// policy is gone.
func ForgetPolicy(namespace, name string) {
	key := namespace + "/" + name
	delaySeconds.DeleteLabelValues(key)
	hedgeRate.DeleteLabelValues(key)
	quantileSeconds.DeletePartialMatch(prometheus.Labels{"policy": key})
	estimateErrors.DeletePartialMatch(prometheus.Labels{"policy": key})
}
