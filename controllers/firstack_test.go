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
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// TestFirstAckGraceRunsFromTheFirstReconcile: a new policy that waited in the
// work queue longer than the grace still waits for its proxies' ACK before
// its first status write. Counted from creation, policies of a 1,000-policy
// apply (up to 4 s in the queue) wrote Pending and then Programmed: 1.85
// writes per policy at 200 writes a second.
func TestFirstAckGraceRunsFromTheFirstReconcile(t *testing.T) {
	created := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pending := &tailcutv1alpha1.HedgePolicyStatus{}
	meta.SetStatusCondition(&pending.Conditions, metav1.Condition{Type: tailcutv1alpha1.ConditionProgrammed, Status: metav1.ConditionFalse, Reason: tailcutv1alpha1.ReasonPending})
	programmed := &tailcutv1alpha1.HedgePolicyStatus{}
	meta.SetStatusCondition(&programmed.Conditions, metav1.Condition{Type: tailcutv1alpha1.ConditionProgrammed, Status: metav1.ConditionTrue, Reason: tailcutv1alpha1.ReasonProgrammed})
	policy := &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", CreationTimestamp: metav1.NewTime(created)}}

	r := &HedgePolicyReconciler{}
	first := created.Add(4 * time.Second) // four seconds in the work queue
	if got := r.firstAckWait(policy, pending, first); got != firstAckGrace {
		t.Errorf("first reconcile 4s after creation: wait %s, want the whole grace %s", got, firstAckGrace)
	}
	if got := r.firstAckWait(policy, pending, first.Add(1500*time.Millisecond)); got != 500*time.Millisecond {
		t.Errorf("1.5s after the first reconcile: wait %s, want 500ms", got)
	}
	if got := r.firstAckWait(policy, pending, first.Add(2100*time.Millisecond)); got != 0 {
		t.Errorf("past the grace: wait %s, want 0 (write Pending)", got)
	}
	if got := r.firstAckWait(policy, programmed, first.Add(time.Second)); got != 0 {
		t.Errorf("the ACK came: wait %s, want 0", got)
	}
	written := policy.DeepCopy()
	written.Status = *pending.DeepCopy()
	if got := r.firstAckWait(written, pending, first.Add(time.Second)); got != 0 {
		t.Errorf("a policy with a status: wait %s, want 0", got)
	}
}
