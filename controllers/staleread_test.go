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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// TestStaleReadWaitsForTheOwnWrite: a reconcile that reads the policy as it
// was before the reconciler's own last status write waits (2 s at most)
// rather than decide from the older status and undo the write.
func TestStaleReadWaitsForTheOwnWrite(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	old := tailcutv1alpha1.HedgePolicyStatus{EffectiveDelay: &metav1.Duration{Duration: 20900 * time.Microsecond}}
	raised := tailcutv1alpha1.HedgePolicyStatus{EffectiveDelay: &metav1.Duration{Duration: 31400 * time.Microsecond},
		BudgetFloor: &tailcutv1alpha1.BudgetFloor{Delay: metav1.Duration{Duration: 20900 * time.Microsecond}, Percent: 8.85}}
	policy := func(rv string, st tailcutv1alpha1.HedgePolicyStatus) *tailcutv1alpha1.HedgePolicy {
		return &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", ResourceVersion: rv}, Status: st}
	}
	for _, tc := range []struct {
		name   string
		cached *tailcutv1alpha1.HedgePolicy
		after  time.Duration
		stale  bool
	}{
		{"the cache shows the status before the write", policy("41", old), 10 * time.Millisecond, true},
		{"the cache shows the write", policy("42", raised), 10 * time.Millisecond, false},
		{"a later spec change, the status as written", policy("43", raised), 10 * time.Millisecond, false},
		{"not shown after 2s: someone else wrote", policy("41", old), 2100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &HedgePolicyReconciler{}
			key := client.ObjectKeyFromObject(tc.cached)
			r.written.Store(key, writtenStatus{resourceVersion: "42", status: raised.DeepCopy(), at: t0})
			if got := r.staleRead(tc.cached, t0.Add(tc.after)); got != tc.stale {
				t.Errorf("stale = %v, want %v", got, tc.stale)
			}
			if _, pending := r.written.Load(key); pending != tc.stale {
				t.Errorf("write still awaited = %v, want %v", pending, tc.stale)
			}
		})
	}
}
