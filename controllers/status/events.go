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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Transition is a condition's change worth an Event.
type Transition struct {
	metav1.Condition
}

// Transitions are the conditions of next that changed (status or reason)
// from prev and deserve an Event (eventworthy), in next's order.
func Transitions(prev, next []metav1.Condition) []Transition {
	var out []Transition
	for _, c := range next {
		before := meta.FindStatusCondition(prev, c.Type)
		if before != nil && before.Status == c.Status && before.Reason == c.Reason {
			continue
		}
		if eventworthy(before, c) {
			out = append(out, Transition{c})
		}
	}
	return out
}

// eventworthy says whether a condition's transition deserves an Event: a
// problem, or the end of one. A new policy going well, a push on its way
// (Pending), Ready and Hedging (which repeat the others) do not: with 1,000
// new policies they made five of every eight API writes the operator sent.
func eventworthy(prev *metav1.Condition, c metav1.Condition) bool {
	switch {
	case c.Type == tailcutv1alpha1.ConditionReady || c.Type == tailcutv1alpha1.ConditionHedging || c.Reason == tailcutv1alpha1.ReasonPending,
		c.Status == metav1.ConditionUnknown: // DelayDerived while not accepted: Accepted says why
		return false
	case c.Status == metav1.ConditionFalse:
		return true
	default:
		return prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason != tailcutv1alpha1.ReasonPending
	}
}
