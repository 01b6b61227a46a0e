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

// Package status computes a HedgePolicy's status from what one evaluation
// found: a pure function of the previous status, the spec and the outcome.
// The reconciler writes the result once; the events it records are the
// conditions' transitions between the two (Transitions).
package status

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/publish"
)

// Outcome is what one evaluation of a policy found, in the order the
// reconciler finds it; it stops at the first step that fails.
type Outcome struct {
	// NotAccepted, when set, is the reason the target cannot be hedged
	// (target.Target's Reason), and NotAcceptedMessage says why. Nothing
	// else was done.
	NotAccepted, NotAcceptedMessage string
	// InvalidQuery is the estimator's error: the policy cannot be evaluated,
	// and its route stays, unhedged.
	InvalidQuery error
	// Estimate is the estimator's decision (hedging off when InvalidQuery).
	Estimate estimate.Result
	// PlanError is why the route plan did not build; nothing was published.
	PlanError error
	// PublisherAbsent names the publish target no publisher serves here.
	PublisherAbsent tailcutv1alpha1.PublishTarget
	// PublishError is the publisher's refusal.
	PublishError error
	// Program is how far proxies took the plan, after a publish.
	Program *publish.ProgramStatus
	// NoEndpoints: the target port has no ready endpoint.
	NoEndpoints bool
}

// maxMessage bounds condition messages (the API allows 32768 bytes).
const maxMessage = 32768

// Compute is the policy's status after an evaluation with outcome o at now.
func Compute(policy *tailcutv1alpha1.HedgePolicy, o Outcome, now metav1.Time) tailcutv1alpha1.HedgePolicyStatus {
	c := computation{policy: policy, now: now, status: *policy.Status.DeepCopy()}
	c.status.ObservedGeneration = policy.Generation
	c.compute(o)
	return c.status
}

type computation struct {
	policy *tailcutv1alpha1.HedgePolicy
	now    metav1.Time
	status tailcutv1alpha1.HedgePolicyStatus
}

func (c *computation) compute(o Outcome) {
	spec := &c.policy.Spec
	if o.NotAccepted != "" {
		c.notAccepted(o.NotAccepted, o.NotAcceptedMessage)
		c.set(tailcutv1alpha1.ConditionProgrammed, false, tailcutv1alpha1.ReasonNotAccepted, "the policy is not accepted")
		c.ready(false)
		return
	}
	if o.InvalidQuery != nil {
		// A policy that cannot be evaluated must not take the Service's
		// traffic down with it: the route stays, unhedged.
		c.notAccepted(tailcutv1alpha1.ReasonInvalidQuery, o.InvalidQuery.Error()+"; the route stays, unhedged")
	} else {
		c.set(tailcutv1alpha1.ConditionAccepted, true, tailcutv1alpha1.ReasonAccepted,
			fmt.Sprintf("target Service %s port %d found", spec.TargetRef.Name, spec.TargetRef.Port))
		o.Estimate.Apply(&c.status, c.now)
		c.set(tailcutv1alpha1.ConditionDelayDerived, o.Estimate.Derived, o.Estimate.DerivedReason, o.Estimate.Reason)
		c.endpoints(o.Estimate)
	}
	switch {
	case o.PlanError != nil:
		c.set(tailcutv1alpha1.ConditionProgrammed, false, tailcutv1alpha1.ReasonPublishFailed, "invalid route plan: "+o.PlanError.Error())
		c.ready(false)
		return
	case o.PublisherAbsent != "":
		c.set(tailcutv1alpha1.ConditionProgrammed, false, tailcutv1alpha1.ReasonPublisherAbsent, fmt.Sprintf("no %s publisher runs in this operator%s", o.PublisherAbsent, howToEnable[o.PublisherAbsent]))
	case o.PublishError != nil:
		c.set(tailcutv1alpha1.ConditionProgrammed, false, tailcutv1alpha1.ReasonPublishFailed, o.PublishError.Error())
	case o.Program != nil:
		c.program(*o.Program)
	}
	c.ready(o.NoEndpoints)
}

// endpoints sets EndpointsBalanced for a policy whose endpoints the
// estimator weighs, and removes it from the others.
func (c *computation) endpoints(r estimate.Result) {
	switch {
	case r.EndpointsNote == "":
		meta.RemoveStatusCondition(&c.status.Conditions, tailcutv1alpha1.ConditionEndpointsBalanced)
	case len(r.SlowEndpoints) > 0:
		c.set(tailcutv1alpha1.ConditionEndpointsBalanced, false, tailcutv1alpha1.ReasonSlowEndpoint, r.EndpointsNote)
	case r.EndpointsNote == estimate.EndpointsUnread:
		meta.SetStatusCondition(&c.status.Conditions, metav1.Condition{
			Type: tailcutv1alpha1.ConditionEndpointsBalanced, Status: metav1.ConditionUnknown, Reason: tailcutv1alpha1.ReasonNotEvaluated,
			Message: r.EndpointsNote, ObservedGeneration: c.policy.Generation, LastTransitionTime: c.now,
		})
	default:
		c.set(tailcutv1alpha1.ConditionEndpointsBalanced, true, tailcutv1alpha1.ReasonNoSlowEndpoint, r.EndpointsNote)
	}
}

// notAccepted records why the policy is not accepted: no delay is derived
// and hedging is off. The delay fields are written as an estimate's are.
func (c *computation) notAccepted(reason, msg string) {
	meta.RemoveStatusCondition(&c.status.Conditions, tailcutv1alpha1.ConditionEndpointsBalanced)
	c.set(tailcutv1alpha1.ConditionAccepted, false, reason, msg)
	estimate.Result{Source: tailcutv1alpha1.DelaySourceNone, Reason: "not accepted: " + msg}.Apply(&c.status, c.now)
	c.status.Proxies = nil
	meta.SetStatusCondition(&c.status.Conditions, metav1.Condition{
		Type: tailcutv1alpha1.ConditionDelayDerived, Status: metav1.ConditionUnknown, Reason: tailcutv1alpha1.ReasonNotAccepted,
		Message: "the policy is not accepted", ObservedGeneration: c.status.ObservedGeneration, LastTransitionTime: c.now,
	})
}

// program records how far proxies took the policy.
func (c *computation) program(ps publish.ProgramStatus) {
	c.status.Proxies = &tailcutv1alpha1.ProxyCounts{Connected: ps.Connected, Programmed: ps.Programmed, Version: ps.Version}
	switch {
	case c.policy.Spec.EffectivePublishTarget() != tailcutv1alpha1.PublishIstio:
		meta.RemoveStatusCondition(&c.status.Conditions, tailcutv1alpha1.ConditionRetriesPreserved)
	case ps.Overridden != "":
		c.set(tailcutv1alpha1.ConditionRetriesPreserved, false, tailcutv1alpha1.ReasonVirtualServiceRetries, ps.Overridden)
	default:
		msg := "no VirtualService in the namespace sets retries on the Service's host"
		if ps.Retries != "" {
			msg += "; " + ps.Retries
		}
		c.set(tailcutv1alpha1.ConditionRetriesPreserved, true, tailcutv1alpha1.ReasonNoRetriesOverridden, msg)
	}
	programmed := func(ok bool, reason, msg string) { c.set(tailcutv1alpha1.ConditionProgrammed, ok, reason, msg) }
	switch {
	case ps.Rejected != "":
		programmed(false, tailcutv1alpha1.ReasonRejected, "a proxy rejected version "+ps.Version+": "+ps.Rejected)
	case ps.Connected == 0:
		programmed(false, tailcutv1alpha1.ReasonNoProxies, "no proxy is connected")
	case ps.Serving < ps.Connected:
		programmed(false, tailcutv1alpha1.ReasonPending,
			fmt.Sprintf("%d of %d proxies run this policy; waiting for the others to acknowledge version %s", ps.Serving, ps.Connected, ps.Version))
	case ps.Programmed < ps.Connected:
		// Every proxy serves the policy; a change is rolling out. Programmed
		// stays True, so Ready does not flap on every delay change.
		programmed(true, tailcutv1alpha1.ReasonProgrammed,
			fmt.Sprintf("%d of %d proxies run version %s; the others still run the previous one", ps.Programmed, ps.Connected, ps.Version))
	case ps.Detail != "":
		programmed(true, tailcutv1alpha1.ReasonProgrammed, ps.Detail)
	default:
		programmed(true, tailcutv1alpha1.ReasonProgrammed, fmt.Sprintf("%d of %d proxies run version %s", ps.Programmed, ps.Connected, ps.Version))
	}
}

// ready sets Ready and Hedging (conditions.go says what each means). Ready
// is False with the reason of the first condition that is not True, or
// NoEndpoints; Hedging is False with the same reason, or with the reason no
// hedge is sent, and True with the delay's source while one is in force.
func (c *computation) ready(noEndpoints bool) {
	spec, st := &c.policy.Spec, &c.status
	notReady := func(reason, msg string) {
		c.set(tailcutv1alpha1.ConditionReady, false, reason, msg)
		c.set(tailcutv1alpha1.ConditionHedging, false, reason, "no hedges: "+msg)
	}
	for _, t := range []string{tailcutv1alpha1.ConditionAccepted, tailcutv1alpha1.ConditionProgrammed} {
		if cond := meta.FindStatusCondition(st.Conditions, t); cond == nil || cond.Status != metav1.ConditionTrue {
			reason, msg := tailcutv1alpha1.ReasonPending, t+" is not set yet"
			if cond != nil {
				reason, msg = cond.Reason, fmt.Sprintf("%s is %s: %s", t, cond.Status, cond.Message)
			}
			notReady(reason, msg)
			return
		}
	}
	if noEndpoints {
		notReady(tailcutv1alpha1.ReasonNoEndpoints,
			fmt.Sprintf("Service %s port %d has no ready endpoint: Envoy answers 503 until one is ready", spec.TargetRef.Name, spec.TargetRef.Port))
		return
	}
	c.set(tailcutv1alpha1.ConditionReady, true, tailcutv1alpha1.ReasonReady, "accepted and programmed")
	derived := meta.FindStatusCondition(st.Conditions, tailcutv1alpha1.ConditionDelayDerived)
	switch {
	case spec.Suspend:
		c.set(tailcutv1alpha1.ConditionHedging, false, tailcutv1alpha1.ReasonSuspended, st.DelayReason)
	case derived == nil:
		c.set(tailcutv1alpha1.ConditionHedging, false, tailcutv1alpha1.ReasonNotEvaluated, "the delay is not evaluated yet")
	case st.EffectiveDelay == nil:
		c.set(tailcutv1alpha1.ConditionHedging, false, derived.Reason, "hedging is off: "+st.DelayReason)
	default:
		c.set(tailcutv1alpha1.ConditionHedging, true, derived.Reason,
			fmt.Sprintf("hedging after %s (%s)%s: %s", st.EffectiveDelay.Duration, st.DelaySource, affinityNote(spec.EffectiveAffinity()), st.DelayReason))
	}
}

// affinityNote says where a policy with affinity sends its hedges.
func affinityNote(a *tailcutv1alpha1.Affinity) string {
	if a == nil {
		return ""
	}
	key := "the path"
	switch {
	case a.HashOn.Header != "":
		key = "header " + a.HashOn.Header
	case a.HashOn.Cookie != "":
		key = "cookie " + a.HashOn.Cookie
	case a.HashOn.QueryParameter != "":
		key = "query parameter " + a.HashOn.QueryParameter
	}
	return fmt.Sprintf(" to each key's next owner (%s on %s)", a.LoadBalancer, key)
}

// set sets a condition; LastTransitionTime moves only when its status does.
func (c *computation) set(condType string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&c.status.Conditions, metav1.Condition{
		Type: condType, Status: s, Reason: reason, Message: Truncate(msg, maxMessage),
		ObservedGeneration: c.status.ObservedGeneration, LastTransitionTime: c.now,
	})
}

// Truncate cuts s to at most n bytes, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// howToEnable says, for a publish target whose publisher is off, what turns
// it on.
var howToEnable = map[tailcutv1alpha1.PublishTarget]string{
	tailcutv1alpha1.PublishXDS:          ": it needs --xds-address (the chart sets it)",
	tailcutv1alpha1.PublishIstio:        ": install the chart with istio.enabled=true (operator flag --istio)",
	tailcutv1alpha1.PublishEnvoyGateway: ": install the chart with envoyGateway.enabled=true (operator flag --envoy-gateway)",
}
