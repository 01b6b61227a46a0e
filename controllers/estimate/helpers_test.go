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
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

const ms = time.Millisecond

// testPolicy is an Auto policy on shop/cart port 8080 with the API's defaults
// (EffectiveAuto fills the rest).
func testPolicy(muts ...func(*tailcutv1alpha1.HedgePolicy)) *tailcutv1alpha1.HedgePolicy {
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-hedge", Generation: 1},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Kind: "Service", Name: "cart", Port: 8080},
			Delay: tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeAuto, Auto: &tailcutv1alpha1.AutoDelay{
				// The API server defaults this; EffectiveAuto leaves 0 alone
				// because 0 (no deadband) is a valid choice.
				DeadbandPercent: tailcutv1alpha1.DefaultDeadbandPercent,
			}},
		},
	}
	for _, m := range muts {
		m(p)
	}
	return p
}

func auto(f func(a *tailcutv1alpha1.AutoDelay)) func(*tailcutv1alpha1.HedgePolicy) {
	return func(p *tailcutv1alpha1.HedgePolicy) { f(p.Spec.Delay.Auto) }
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// checkInvariants holds for every Result: hedging off means no delay and
// source None; otherwise the delay is finite and within [min, max].
func checkInvariants(t *testing.T, p *tailcutv1alpha1.HedgePolicy, res Result) {
	t.Helper()
	a := p.Spec.EffectiveAuto()
	switch {
	case res.Source == tailcutv1alpha1.DelaySourceNone:
		if res.Delay != 0 {
			t.Errorf("source None with delay %s", res.Delay)
		}
	case res.Delay < a.Min.Duration || res.Delay > a.Max.Duration:
		t.Errorf("delay %s outside [%s, %s] (source %s)", res.Delay, a.Min.Duration, a.Max.Duration, res.Source)
	}
	if res.Reason == "" || strings.ContainsAny(res.Reason, "\n") || len(res.Reason) > 1024 {
		t.Errorf("reason must be one non-empty line under 1024 characters: %q", res.Reason)
	}
	if res.DerivedReason == "" {
		t.Errorf("DerivedReason is empty")
	}
}

// perEndpointQuery says whether q is one of the sampler's per-endpoint
// queries, which the simulated Prometheus servers answer with no series:
// they model a cluster's stats, not its endpoints' (endpoints_test.go and
// the local stack's TestOneSlowReplicaIsWeightedDown test those).
func perEndpointQuery(q string) bool {
	return q == sampleEndpoints
}
