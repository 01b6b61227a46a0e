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

package status

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/publish"
)

// cond is a condition as a test expects it: status, reason, and a piece of
// the message.
type cond struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

var (
	t0 = metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(30 * time.Second))
)

func policyOn(mut ...func(*tailcutv1alpha1.HedgePolicy)) *tailcutv1alpha1.HedgePolicy {
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: "web", Port: 80}},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

var derived = estimate.Result{Delay: 18700 * time.Microsecond, Source: tailcutv1alpha1.DelaySourcePrometheus, Derived: true,
	DerivedReason: tailcutv1alpha1.ReasonDerived, Reason: "delay 18.7ms: 3.3% of 1800 requests took longer than 17ms (p95), +10% margin"}

var allProgrammed = publish.ProgramStatus{Connected: 2, Programmed: 2, Serving: 2, Version: "v1"}

// TestCompute is the status of one evaluation, in Envoy Gateway's style: a
// policy and what the evaluation found in, the conditions and delay fields
// out. The expected values are the API's documented meanings
// (docs/reference.md), not what the code happens to write.
func TestCompute(t *testing.T) {
	cases := []struct {
		name    string
		policy  *tailcutv1alpha1.HedgePolicy
		outcome Outcome
		want    map[string]cond
		check   func(t *testing.T, st tailcutv1alpha1.HedgePolicyStatus)
	}{
		{"hedging, every proxy programmed", policyOn(), Outcome{Estimate: derived, Program: &allProgrammed}, map[string]cond{
			tailcutv1alpha1.ConditionAccepted:     {metav1.ConditionTrue, tailcutv1alpha1.ReasonAccepted, "target Service web port 80 found"},
			tailcutv1alpha1.ConditionDelayDerived: {metav1.ConditionTrue, tailcutv1alpha1.ReasonDerived, "delay 18.7ms"},
			tailcutv1alpha1.ConditionProgrammed:   {metav1.ConditionTrue, tailcutv1alpha1.ReasonProgrammed, "2 of 2 proxies run version v1"},
			tailcutv1alpha1.ConditionReady:        {metav1.ConditionTrue, tailcutv1alpha1.ReasonReady, "accepted and programmed"},
			tailcutv1alpha1.ConditionHedging:      {metav1.ConditionTrue, tailcutv1alpha1.ReasonDerived, "hedging after 18.7ms (Prometheus)"},
		}, func(t *testing.T, st tailcutv1alpha1.HedgePolicyStatus) {
			if st.EffectiveDelay == nil || st.EffectiveDelay.Duration != 18700*time.Microsecond || st.LastDelayChange == nil || !st.LastDelayChange.Equal(&t1) {
				t.Errorf("delay %v changed at %v, want 18.7ms changed now", st.EffectiveDelay, st.LastDelayChange)
			}
			if st.Proxies == nil || *st.Proxies != (tailcutv1alpha1.ProxyCounts{Connected: 2, Programmed: 2, Version: "v1"}) || st.ObservedGeneration != 3 {
				t.Errorf("proxies %+v, observed generation %d; want 2 of 2 at v1, generation 3", st.Proxies, st.ObservedGeneration)
			}
		}},
		{"a tail out of reach: hedging off, Ready, said in DelayDerived and Hedging", policyOn(), Outcome{Estimate: estimate.Result{
			Source: tailcutv1alpha1.DelaySourceNone, DerivedReason: tailcutv1alpha1.ReasonTailOutOfReach,
			Reason: "hedging off (TailOutOfReach): 33.3% of 3000 requests took 31ms or longer"}, Program: &allProgrammed}, map[string]cond{
			tailcutv1alpha1.ConditionDelayDerived: {metav1.ConditionFalse, tailcutv1alpha1.ReasonTailOutOfReach, "33.3% of 3000 requests"},
			tailcutv1alpha1.ConditionReady:        {metav1.ConditionTrue, tailcutv1alpha1.ReasonReady, "accepted and programmed"},
			tailcutv1alpha1.ConditionHedging:      {metav1.ConditionFalse, tailcutv1alpha1.ReasonTailOutOfReach, "hedging is off: hedging off (TailOutOfReach)"},
		}, func(t *testing.T, st tailcutv1alpha1.HedgePolicyStatus) {
			if st.EffectiveDelay != nil || st.DelaySource != tailcutv1alpha1.DelaySourceNone {
				t.Errorf("delay %v from %q, want hedging off", st.EffectiveDelay, st.DelaySource)
			}
			if tr := Transitions(nil, st.Conditions); !slices.ContainsFunc(tr, func(c Transition) bool {
				return c.Type == tailcutv1alpha1.ConditionDelayDerived && c.Reason == tailcutv1alpha1.ReasonTailOutOfReach
			}) {
				t.Errorf("no event for DelayDerived=False TailOutOfReach among %+v", tr)
			}
		}},
		{"target Service gone", policyOn(func(p *tailcutv1alpha1.HedgePolicy) {
			p.Status.EffectiveDelay = &metav1.Duration{Duration: 20 * time.Millisecond}
			p.Status.Proxies = &tailcutv1alpha1.ProxyCounts{Connected: 2, Programmed: 2}
		}), Outcome{NotAccepted: tailcutv1alpha1.ReasonTargetNotFound, NotAcceptedMessage: "Service shop/web not found"}, map[string]cond{
			tailcutv1alpha1.ConditionAccepted:     {metav1.ConditionFalse, tailcutv1alpha1.ReasonTargetNotFound, "Service shop/web not found"},
			tailcutv1alpha1.ConditionDelayDerived: {metav1.ConditionUnknown, tailcutv1alpha1.ReasonNotAccepted, "not accepted"},
			tailcutv1alpha1.ConditionProgrammed:   {metav1.ConditionFalse, tailcutv1alpha1.ReasonNotAccepted, "not accepted"},
			tailcutv1alpha1.ConditionReady:        {metav1.ConditionFalse, tailcutv1alpha1.ReasonTargetNotFound, "Accepted is False"},
			tailcutv1alpha1.ConditionHedging:      {metav1.ConditionFalse, tailcutv1alpha1.ReasonTargetNotFound, "no hedges"},
		}, func(t *testing.T, st tailcutv1alpha1.HedgePolicyStatus) {
			if st.EffectiveDelay != nil || st.DelaySource != tailcutv1alpha1.DelaySourceNone || st.Proxies != nil ||
				st.DelayReason != "not accepted: Service shop/web not found" || st.LastDelayChange == nil || !st.LastDelayChange.Equal(&t1) {
				t.Errorf("delay %v from %q (%q), proxies %v, changed at %v; want hedging off now, no proxies", st.EffectiveDelay, st.DelaySource, st.DelayReason, st.Proxies, st.LastDelayChange)
			}
		}},
		{"invalid query: the route stays, unhedged", policyOn(), Outcome{InvalidQuery: errors.New(`query template: unexpected "}"`), Program: &allProgrammed}, map[string]cond{
			tailcutv1alpha1.ConditionAccepted:   {metav1.ConditionFalse, tailcutv1alpha1.ReasonInvalidQuery, "the route stays, unhedged"},
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionTrue, tailcutv1alpha1.ReasonProgrammed, "2 of 2"},
			tailcutv1alpha1.ConditionReady:      {metav1.ConditionFalse, tailcutv1alpha1.ReasonInvalidQuery, ""},
		}, nil},
		{"the plan does not build", policyOn(), Outcome{Estimate: derived, PlanError: errors.New("port 0 is not valid")}, map[string]cond{
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionFalse, tailcutv1alpha1.ReasonPublishFailed, "invalid route plan: port 0"},
			tailcutv1alpha1.ConditionReady:      {metav1.ConditionFalse, tailcutv1alpha1.ReasonPublishFailed, ""},
		}, nil},
		{"no Istio publisher", policyOn(), Outcome{Estimate: derived, PublisherAbsent: tailcutv1alpha1.PublishIstio}, map[string]cond{
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionFalse, tailcutv1alpha1.ReasonPublisherAbsent, "no Istio publisher runs"},
		}, nil},
		{"a proxy rejected it", policyOn(), Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 2, Programmed: 1, Serving: 1, Version: "v2", Rejected: "invalid cluster"}}, map[string]cond{
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionFalse, tailcutv1alpha1.ReasonRejected, "a proxy rejected version v2: invalid cluster"},
			tailcutv1alpha1.ConditionReady:      {metav1.ConditionFalse, tailcutv1alpha1.ReasonRejected, ""},
		}, nil},
		{"waiting for a proxy", policyOn(), Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 2, Programmed: 1, Serving: 1, Version: "v2"}}, map[string]cond{
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionFalse, tailcutv1alpha1.ReasonPending, "1 of 2 proxies run this policy"},
		}, nil},
		{"a change rolling out keeps Programmed", policyOn(), Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 2, Programmed: 1, Serving: 2, Version: "v2"}}, map[string]cond{
			tailcutv1alpha1.ConditionProgrammed: {metav1.ConditionTrue, tailcutv1alpha1.ReasonProgrammed, "the others still run the previous one"},
			tailcutv1alpha1.ConditionReady:      {metav1.ConditionTrue, tailcutv1alpha1.ReasonReady, ""},
		}, nil},
		{"no ready endpoint", policyOn(), Outcome{Estimate: derived, Program: &allProgrammed, NoEndpoints: true}, map[string]cond{
			tailcutv1alpha1.ConditionReady:   {metav1.ConditionFalse, tailcutv1alpha1.ReasonNoEndpoints, "Envoy answers 503"},
			tailcutv1alpha1.ConditionHedging: {metav1.ConditionFalse, tailcutv1alpha1.ReasonNoEndpoints, "no hedges"},
		}, nil},
		{"suspended", policyOn(func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Suspend = true }),
			Outcome{Estimate: estimate.Suspended(policyOn()), Program: &allProgrammed}, map[string]cond{
				tailcutv1alpha1.ConditionReady:   {metav1.ConditionTrue, tailcutv1alpha1.ReasonReady, ""},
				tailcutv1alpha1.ConditionHedging: {metav1.ConditionFalse, tailcutv1alpha1.ReasonSuspended, "spec.suspend"},
			}, nil},
		{"affinity: the hedges' destination said", policyOn(func(p *tailcutv1alpha1.HedgePolicy) {
			p.Spec.Affinity = &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Header: "x-cache-key"}}
		}), Outcome{Estimate: derived, Program: &allProgrammed}, map[string]cond{
			tailcutv1alpha1.ConditionHedging: {metav1.ConditionTrue, tailcutv1alpha1.ReasonDerived, "hedging after 18.7ms (Prometheus) to each key's next owner (RingHash on header x-cache-key): delay 18.7ms"},
		}, nil},
		{"Istio: a VirtualService's retries", policyOn(func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Publish.Target = tailcutv1alpha1.PublishIstio }),
			Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 1, Programmed: 1, Serving: 1, Version: "v1", Overridden: "VirtualService shop/web sets retries"}}, map[string]cond{
				tailcutv1alpha1.ConditionRetriesPreserved: {metav1.ConditionFalse, tailcutv1alpha1.ReasonVirtualServiceRetries, "VirtualService shop/web"},
			}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Compute(tc.policy, tc.outcome, t1)
			for typ, want := range tc.want {
				got := meta.FindStatusCondition(st.Conditions, typ)
				if got == nil || got.Status != want.status || got.Reason != want.reason || !strings.Contains(got.Message, want.message) {
					t.Errorf("%s = %+v, want %s %s with %q", typ, got, want.status, want.reason, want.message)
					continue
				}
				if got.ObservedGeneration != 3 || !got.LastTransitionTime.Equal(&t1) {
					t.Errorf("%s: generation %d at %s, want 3 at %s", typ, got.ObservedGeneration, got.LastTransitionTime, t1)
				}
			}
			if meta.FindStatusCondition(st.Conditions, tailcutv1alpha1.ConditionRetriesPreserved) != nil && tc.policy.Spec.Publish.Target != tailcutv1alpha1.PublishIstio {
				t.Error("RetriesPreserved on a policy of tailcut's proxy")
			}
			if tc.check != nil {
				tc.check(t, st)
			}
		})
	}
}

// TestComputeKeepsTransitionTimes: a second evaluation that finds the same
// leaves every condition's LastTransitionTime and the delay's last change
// where they were.
func TestComputeKeepsTransitionTimes(t *testing.T) {
	p := policyOn()
	p.Status = Compute(p, Outcome{Estimate: derived, Program: &allProgrammed}, t0)
	later := metav1.NewTime(t1.Add(time.Minute))
	st := Compute(p, Outcome{Estimate: derived, Program: &allProgrammed}, later)
	for _, c := range st.Conditions {
		if !c.LastTransitionTime.Equal(&t0) {
			t.Errorf("%s moved to %s with nothing changed", c.Type, c.LastTransitionTime)
		}
	}
	if !st.LastDelayChange.Equal(&t0) {
		t.Errorf("the delay's last change moved to %s", st.LastDelayChange)
	}
}

// TestTransitions: the events are the conditions' changes worth one: a
// problem (Warning) or its end (Normal); never a new policy going well, a
// push on its way, Ready or Hedging.
func TestTransitions(t *testing.T) {
	p := policyOn()
	first := Compute(p, Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 2, Serving: 0, Version: "v1"}}, t0)
	if got := Transitions(nil, first.Conditions); len(got) != 0 {
		t.Errorf("a new policy on its way: events %v, want none", got)
	}
	p.Status = first
	rejected := Compute(p, Outcome{Estimate: derived, Program: &publish.ProgramStatus{Connected: 2, Serving: 1, Version: "v1", Rejected: "bad"}}, t1)
	got := Transitions(first.Conditions, rejected.Conditions)
	if len(got) != 1 || got[0].Type != tailcutv1alpha1.ConditionProgrammed || got[0].Reason != tailcutv1alpha1.ReasonRejected {
		t.Errorf("a rejection: events %v, want Programmed=False Rejected only", got)
	}
	p.Status = rejected
	fixed := Compute(p, Outcome{Estimate: derived, Program: &allProgrammed}, t1)
	got = Transitions(rejected.Conditions, fixed.Conditions)
	if len(got) != 1 || got[0].Type != tailcutv1alpha1.ConditionProgrammed || got[0].Status != metav1.ConditionTrue {
		t.Errorf("the rejection's end: events %v, want Programmed=True only", got)
	}
	p.Status = fixed
	gone := Compute(p, Outcome{NotAccepted: tailcutv1alpha1.ReasonTargetNotFound, NotAcceptedMessage: "Service shop/web not found"}, t1)
	var types []string
	for _, tr := range Transitions(fixed.Conditions, gone.Conditions) {
		types = append(types, tr.Type+"="+string(tr.Status))
	}
	if strings.Join(types, ",") != "Accepted=False,Programmed=False" {
		t.Errorf("the target gone: events %v, want Accepted=False and Programmed=False (not DelayDerived=Unknown, Ready, Hedging)", types)
	}
}
