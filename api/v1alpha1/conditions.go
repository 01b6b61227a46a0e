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

package v1alpha1

// Condition types on HedgePolicy.status.conditions.
const (
	// ConditionAccepted is True when the policy is valid against the cluster: the
	// target Service and port exist and the policy's queries parse.
	ConditionAccepted = "Accepted"
	// ConditionDelayDerived is True when the delay in force was derived from fresh,
	// trustworthy data (or is static). False names the reason it is not.
	ConditionDelayDerived = "DelayDerived"
	// ConditionProgrammed is True when every connected proxy acknowledged the
	// configuration that carries the delay in force.
	ConditionProgrammed = "Programmed"
	// ConditionReady is True when the policy is reconciled and programmed as
	// intended: Accepted and Programmed are True and the Service has a ready
	// endpoint. A suspend, a designed pause (HedgingHurts, BudgetExceeded at
	// max) and a fallback that turns hedging off are the policy working, so
	// they are Ready: health checks (kubectl wait, Flux, Argo CD) read Ready.
	// False carries the reason of what is wrong (TargetNotFound, Pending,
	// Rejected, NoEndpoints, ...).
	ConditionReady = "Ready"
	// ConditionHedging says whether hedges are being sent. Its reason is
	// kubectl get hp's REASON column: while a delay is in force, where it
	// comes from (the DelayDerived reason: Derived, Static, or why the last
	// known or fallback delay stands, such as NoMetricsProvider); otherwise
	// why no hedge is sent (Suspended, HedgingHurts, NoEndpoints, or the
	// reason the policy is not Ready).
	ConditionHedging = "Hedging"
	// ConditionRetriesPreserved is set on policies published to Istio: False
	// when a VirtualService sets retries on the same host, which the hedge's
	// route patch overrides; the message says what the user gets.
	ConditionRetriesPreserved = "RetriesPreserved"
	// ConditionEndpointsBalanced is set on Auto policies published by xDS,
	// whose endpoints tailcut weighs: False (SlowEndpoint) while an endpoint
	// answers so much slower than the others that tailcut sends it less of
	// the hedged traffic (status.slowEndpoints); the message names it, its
	// mean latency, its share of requests and its weight.
	ConditionEndpointsBalanced = "EndpointsBalanced"
)

// Condition reasons. Each names one case so alerts and tests can match on it.
const (
	ReasonNoRetriesOverridden   = "NoVirtualServiceRetries"
	ReasonVirtualServiceRetries = "VirtualServiceRetries"

	ReasonAccepted          = "Accepted"
	ReasonTargetNotFound    = "TargetNotFound"
	ReasonPortNotFound      = "PortNotFound"
	ReasonUnsupportedTarget = "UnsupportedTarget"
	ReasonInvalidQuery      = "InvalidQuery"
	// ReasonConflicted: an older policy hedges the same Service port; Envoy can
	// route a Service port by one policy only. The message names the winner.
	ReasonConflicted = "Conflicted"

	ReasonStatic          = "Static"
	ReasonFanOut          = "FanOut"
	ReasonDerived         = "Derived"
	ReasonNoMetrics       = "NoMetricsProvider"
	ReasonNotEvaluated    = "NotEvaluated"
	ReasonPublisherAbsent = "PublisherNotConfigured"

	ReasonProgrammed    = "Programmed"
	ReasonPending       = "Pending"
	ReasonNoProxies     = "NoProxiesConnected"
	ReasonRejected      = "Rejected"
	ReasonPublishFailed = "PublishFailed"

	ReasonReady = "Ready"
	// ReasonSuspended: spec.suspend is set; the route stays, unhedged.
	ReasonSuspended = "Suspended"
	// ReasonNoEndpoints: the Service has no ready endpoint; Envoy answers 503.
	ReasonNoEndpoints = "NoEndpoints"
)

// ReasonNotAccepted marks Programmed and DelayDerived while the policy is not
// accepted: nothing is evaluated or published for it.
const ReasonNotAccepted = "NotAccepted"

// DelayDerived reasons set by the Prometheus estimator. Each names one case in
// which no trustworthy delay could be read (the delay then stays at the last good
// value while it is younger than staleAfter, else the fallback applies), or one
// guard that moved the delay away from the plain quantile.
const (
	// ReasonNoData: a query returned no series (the metric is absent or has no
	// traffic in the window).
	ReasonNoData = "NoData"
	// ReasonQuantileNaN: the quantile is NaN (no requests in the window).
	ReasonQuantileNaN = "QuantileNaN"
	// ReasonMultipleSeries: a query that must return one series returned several.
	ReasonMultipleSeries = "MultipleSeries"
	// ReasonQuantileInfinite: the quantile is +Inf (it lies in the +Inf bucket).
	ReasonQuantileInfinite = "QuantileInfinite"
	// ReasonQuantileNegative: the quantile is negative.
	ReasonQuantileNegative = "QuantileNegative"
	// ReasonQuantileAbsurd: the quantile is larger than 60s or ten times max.
	ReasonQuantileAbsurd = "QuantileAbsurd"
	// ReasonTooFewSamples: fewer than minSamples requests in the window.
	ReasonTooFewSamples = "TooFewSamples"
	// ReasonNoTraffic: the hedged route carried no request in the window.
	ReasonNoTraffic = "NoTraffic"
	// ReasonQueryTimeout: a query did not answer within the per-query timeout.
	ReasonQueryTimeout = "QueryTimeout"
	// ReasonPrometheusHTTPError: Prometheus answered with an HTTP error status.
	ReasonPrometheusHTTPError = "PrometheusHTTPError"
	// ReasonBadResponse: Prometheus answered with a body that is not a valid
	// query result.
	ReasonBadResponse = "BadResponse"
	// ReasonQueryFailed: any other query failure (connection refused, query
	// rejected by the server).
	ReasonQueryFailed = "QueryFailed"
	// ReasonBudgetExceeded: the measured hedge rate is above the budget, so the
	// delay was raised, or hedging paused when the delay is already at max.
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonHedgingHurts: the unhedged latency rose while hedges were being sent
	// (shared slowness such as saturation), so hedging is paused for a while.
	ReasonHedgingHurts = "HedgingHurts"
	// ReasonTailOutOfReach: far more requests than the budget are slow (a slow
	// mode, as one slow replica of three makes), and a hedge sent at the delay
	// the budget allows would answer after nearly all of them: no delay within
	// the budget cuts this tail, so hedging is off. The message gives the slow
	// share and the budget hedging it would take.
	ReasonTailOutOfReach = "TailOutOfReach"
	// ReasonSlowEndpoint: EndpointsBalanced is False: an endpoint is
	// weighted down (status.slowEndpoints).
	ReasonSlowEndpoint = "SlowEndpoint"
	// ReasonNoSlowEndpoint: EndpointsBalanced is True: every endpoint with
	// enough requests to judge answers within twice the median endpoint's
	// mean latency.
	ReasonNoSlowEndpoint = "NoSlowEndpoint"
)
