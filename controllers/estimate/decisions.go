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

	"k8s.io/apimachinery/pkg/types"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// decisions are the estimator's own memory of what it decided for each
// policy, so that a reconcile that brings nothing new (a proxy's ACK, a
// status write coming back, a requeue) reports the decision in force instead
// of taking another. A new decision is taken when the sampler made the
// policy due (new readings, the interval passed), when the spec changed, or
// when the decision is an evaluation interval old whatever the sampler did.
// The first decision after a start or a failover is taken afresh, from
// status.
type decisions struct {
	mu  sync.Mutex
	due map[types.NamespacedName]uint64 // how many times the sampler made the policy due
	by  map[types.NamespacedName]decision
}

// decision is one policy's last decision and what it was taken on.
type decision struct {
	generation int64
	due        uint64
	at         time.Time
	result     Result
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

// current is the decision in force for the policy at now, unless a new one
// is to be taken.
func (d *decisions) current(policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, bool) {
	key := types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.by[key]
	if !ok || last.generation != policy.Generation || last.due != d.due[key] ||
		now.Before(last.at) || now.Sub(last.at) >= policy.Spec.EffectiveEvaluationInterval() {
		return Result{}, false
	}
	return last.result, true
}

// remember records a decision taken at now.
func (d *decisions) remember(policy *tailcutv1alpha1.HedgePolicy, now time.Time, res Result) {
	key := types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.by[key] = decision{generation: policy.Generation, due: d.due[key], at: now, result: res}
}
