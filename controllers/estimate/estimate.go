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

// Package estimate decides the hedge delay for a policy at one evaluation and
// explains the decision. Static policies need no data; Auto policies read latency
// quantiles and hedge rates from a metrics provider.
package estimate

import (
	"context"
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Result is the estimator's decision for one policy at one evaluation.
type Result struct {
	// Delay is the hedge delay to program. Zero means hedging is off; otherwise
	// it is within spec.delay.auto min and max for Auto policies.
	Delay time.Duration
	// Target is the delay the latest readings ask for, clamped, before the
	// deadband, the step limit and the one-change-per-interval rule; it differs
	// from Delay while the delay is moving. Zero when nothing was derived.
	Target time.Duration
	// Source says where Delay came from.
	Source tailcutv1alpha1.DelaySource
	// Reason is a one-line, human explanation, copied to status.delayReason.
	Reason string
	// Derived is the DelayDerived condition: true when Delay comes from fresh,
	// trustworthy data or from spec.delay.static.
	Derived bool
	// DerivedReason is the DelayDerived condition's reason.
	DerivedReason string
	// Quantile and HedgeRate are the readings behind the decision, when any.
	// Quantile is set only for a trusted reading, so status.quantile.sampledAt
	// is when the last good one was taken: the Prometheus estimator judges
	// staleAfter by it.
	Quantile  *tailcutv1alpha1.QuantileObservation
	HedgeRate *tailcutv1alpha1.HedgeRateObservation
	// Floor is the budget floor to keep in status; nil clears it.
	Floor *tailcutv1alpha1.BudgetFloor
	// SlowEndpoints are the endpoints weighted down on the hedged route
	// (endpoints.go), and EndpointsNote says why or why not: empty when the
	// policy's endpoints are not weighed (not Auto on xDS).
	SlowEndpoints []tailcutv1alpha1.SlowEndpoint
	EndpointsNote string
	// LastDelayChange is when the delay in force last changed, as the
	// estimator that remembers its decisions knows it (decisions); nil when
	// it does not, and Apply then dates a change by the status it is given.
	LastDelayChange *metav1.Time
}

// Apply records the result in status, which reports it: the delay in force,
// when it last changed (LastDelayChange moves only when the delay does), the
// last good readings and the budget floor. The estimator decides from its own
// memory of these (decisions), which status seeds after a start.
func (r Result) Apply(status *tailcutv1alpha1.HedgePolicyStatus, now metav1.Time) {
	var delay *metav1.Duration
	if r.Delay > 0 {
		delay = &metav1.Duration{Duration: r.Delay}
	}
	switch {
	case r.LastDelayChange != nil:
		status.LastDelayChange = r.LastDelayChange.DeepCopy()
	case !apiequality.Semantic.DeepEqual(delay, status.EffectiveDelay):
		status.LastDelayChange = &now
	}
	status.EffectiveDelay = delay
	status.DelaySource = r.Source
	status.DelayReason = r.Reason
	if len(status.DelayReason) > maxReason {
		status.DelayReason = status.DelayReason[:maxReason-3] + "..."
	}
	if r.Quantile != nil {
		status.Quantile = r.Quantile
	}
	if r.HedgeRate != nil {
		status.HedgeRate = r.HedgeRate
	}
	status.BudgetFloor = r.Floor
	status.SlowEndpoints = r.SlowEndpoints
}

// maxReason is the API's limit on status.delayReason.
const maxReason = 1024

// Estimator decides the delay for a policy, suspended ones (Suspended)
// included. Metric outages are not errors: they come back as a Result with
// Derived false. An error means the policy itself
// cannot be evaluated (for example its query template does not parse), and the
// controller reports it as Accepted=False.
type Estimator interface {
	Estimate(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, error)
}

// StaticOnly serves Static policies and, having no metrics provider, answers every
// Auto policy with its fallback. It is what the operator runs when no Prometheus
// address is configured.
type StaticOnly struct{}

// Estimate implements Estimator.
func (StaticOnly) Estimate(_ context.Context, policy *tailcutv1alpha1.HedgePolicy, _ time.Time) (Result, error) {
	spec := &policy.Spec
	if spec.Suspend {
		return Suspended(policy), nil
	}
	var res Result
	if spec.EffectiveDelayMode() != tailcutv1alpha1.DelayModeAuto {
		res = Static(spec)
	} else {
		res = Fallback(spec, tailcutv1alpha1.ReasonNoMetrics, "no Prometheus address is configured (--prometheus-url)")
	}
	record(policy, res, "")
	return res, nil
}

// Suspended is the result for a policy with spec.suspend: hedging off, by
// choice, with nothing to derive and nothing queried.
func Suspended(policy *tailcutv1alpha1.HedgePolicy) Result {
	res := Result{
		Source:        tailcutv1alpha1.DelaySourceNone,
		Reason:        "hedging suspended (spec.suspend): the route stays, unhedged",
		Derived:       true,
		DerivedReason: tailcutv1alpha1.ReasonSuspended,
	}
	record(policy, res, "")
	return res
}

// Static is the result for a policy whose delay is not derived: Static, or
// FanOut.
func Static(spec *tailcutv1alpha1.HedgePolicySpec) Result {
	if spec.EffectiveDelayMode() == tailcutv1alpha1.DelayModeFanOut {
		d, copies := tailcutv1alpha1.FanOutDelay, spec.EffectiveMaxHedges()
		return Result{
			Delay:  d,
			Source: tailcutv1alpha1.DelaySourceFanOut,
			Reason: fmt.Sprintf("fan-out (spec.delay.mode FanOut): %d more %s of each request %s apart, as the %d%% budget allows",
				copies, plural(copies, "copy", "copies"), d, spec.EffectiveBudget().MaxExtraLoadPercent),
			Derived:       true,
			DerivedReason: tailcutv1alpha1.ReasonFanOut,
		}
	}
	d := spec.Delay.Static.Duration
	return Result{
		Delay:         d,
		Source:        tailcutv1alpha1.DelaySourceStatic,
		Reason:        fmt.Sprintf("static delay %s from spec.delay.static", d),
		Derived:       true,
		DerivedReason: tailcutv1alpha1.ReasonStatic,
	}
}

// Fallback is the result when no trustworthy delay can be derived and the last
// good one is stale or absent: the policy's fallback delay, kept within auto
// min and max, or hedging off.
func Fallback(spec *tailcutv1alpha1.HedgePolicySpec, reason, why string) Result {
	auto := spec.EffectiveAuto()
	fb := auto.Fallback
	r := Result{Derived: false, DerivedReason: reason}
	if fb.Action == tailcutv1alpha1.FallbackStatic && fb.Delay != nil && fb.Delay.Duration > 0 {
		r.Delay = clamp(fb.Delay.Duration, &auto)
		r.Source = tailcutv1alpha1.DelaySourceFallback
		r.Reason = fmt.Sprintf("fallback delay %s: %s", r.Delay, why)
		if r.Delay != fb.Delay.Duration {
			r.Reason = fmt.Sprintf("fallback delay %s (%s clamped to min/max): %s", r.Delay, fb.Delay.Duration, why)
		}
		return r
	}
	r.Source = tailcutv1alpha1.DelaySourceNone
	r.Reason = "hedging off (fallback Disable): " + why
	return r
}

func plural(n int32, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
