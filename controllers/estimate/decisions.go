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
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// decisions are the estimator's own memory of what it decided for each
// policy. They hold the two things a decision depends on:
//   - the decision in force, so that a reconcile that brings nothing new (a
//     proxy's ACK, a status write coming back, a requeue) reports it instead
//     of taking another. A new decision is taken when the sampler made the
//     policy due (new readings, the interval passed), when the spec changed,
//     or when the decision is an evaluation interval old whatever the
//     sampler did;
//   - what the next decision starts from (prior): the delay in force, when it
//     last changed, the last good readings, the budget floor and the
//     DelayDerived verdict, as this process decided them. The policy's status
//     only reports them, and seeds them when the estimator first meets the
//     policy (a start, a failover). A status read from a cache that has not
//     seen the last write yet cannot undo that write: in the kind e2e,
//     deciding from such a status swung the delay 20.9 -> 31.4 -> 20.9 ms.
type decisions struct {
	mu  sync.Mutex
	due map[types.NamespacedName]uint64 // how many times the sampler made the policy due
	by  map[types.NamespacedName]decision
}

// decision is one policy's last decision and what it was taken on.
type decision struct {
	uid        types.UID
	generation int64
	due        uint64
	at         time.Time
	result     Result
	// prior is the status the next decision reads (decide): the fields
	// Result.Apply writes and the DelayDerived condition, as left by this
	// decision.
	prior tailcutv1alpha1.HedgePolicyStatus
}

func newDecisions() *decisions {
	return &decisions{due: map[types.NamespacedName]uint64{}, by: map[types.NamespacedName]decision{}}
}

// markDue records that the sampler made the policy due.
func (d *decisions) markDue(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.due[key]++
}

// forget drops the policies keep rejects.
func (d *decisions) forget(keep func(types.NamespacedName) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key := range d.by {
		if !keep(key) {
			delete(d.by, key)
			delete(d.due, key)
		}
	}
}

// drop forgets the policy's decisions.
func (d *decisions) drop(policy *tailcutv1alpha1.HedgePolicy) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.by, types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name})
}

// last is the policy's remembered decision, if it is this policy's (a policy
// deleted and created again under its name starts afresh).
func (d *decisions) last(policy *tailcutv1alpha1.HedgePolicy) (decision, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.by[types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}]
	return last, ok && last.uid == policy.UID
}

// current is the decision in force for the policy at now, unless a new one
// is to be taken.
func (d *decisions) current(policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, bool) {
	last, ok := d.last(policy)
	d.mu.Lock()
	due := d.due[types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}]
	d.mu.Unlock()
	if !ok || last.generation != policy.Generation || last.due != due ||
		now.Before(last.at) || now.Sub(last.at) >= policy.Spec.EffectiveEvaluationInterval() {
		return Result{}, false
	}
	return last.result, true
}

// prior is the policy as the next decision sees it: its spec, with the
// status the estimator last left it in, or the policy's own status when the
// estimator has not decided for it yet.
func (d *decisions) prior(policy *tailcutv1alpha1.HedgePolicy) *tailcutv1alpha1.HedgePolicy {
	last, ok := d.last(policy)
	if !ok {
		return policy
	}
	seen := *policy
	seen.Status = last.prior
	return &seen
}

// remember records a decision taken at now from prior (the policy as prior
// returned it), and returns the result with the time the delay last changed.
func (d *decisions) remember(prior *tailcutv1alpha1.HedgePolicy, now time.Time, res Result) Result {
	next := tailcutv1alpha1.HedgePolicyStatus{
		EffectiveDelay: prior.Status.EffectiveDelay, LastDelayChange: prior.Status.LastDelayChange,
		DelaySource: prior.Status.DelaySource, DelayReason: prior.Status.DelayReason,
		Quantile: prior.Status.Quantile, HedgeRate: prior.Status.HedgeRate, BudgetFloor: prior.Status.BudgetFloor,
		SlowEndpoints: prior.Status.SlowEndpoints,
	}
	nowT := metav1.NewTime(now)
	res.Apply(&next, nowT)
	res.LastDelayChange = next.LastDelayChange
	derived := metav1.Condition{Type: tailcutv1alpha1.ConditionDelayDerived, Status: metav1.ConditionFalse,
		Reason: res.DerivedReason, ObservedGeneration: prior.Generation, LastTransitionTime: nowT}
	if res.Derived {
		derived.Status = metav1.ConditionTrue
	}
	if derived.Reason == "" {
		derived.Reason = tailcutv1alpha1.ReasonNotEvaluated
	}
	meta.SetStatusCondition(&next.Conditions, derived)

	key := types.NamespacedName{Namespace: prior.Namespace, Name: prior.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.by[key] = decision{uid: prior.UID, generation: prior.Generation, due: d.due[key], at: now, result: res, prior: next}
	return res
}
