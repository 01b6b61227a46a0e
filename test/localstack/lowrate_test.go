//go:build localstack

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

package localstack

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// #26 item 4: at a low rate a window too short for minSamples never derives,
// and the reason must say what to change. At 5 requests/s a 15s window holds
// about 75 requests, fewer than minSamples 100; the reason names a window,
// and that window, applied, derives. By hand: 100 x 1.2 / 5 = 24s, which
// rounds to 30s (15s steps); a reading that covered less of the window reads
// a lower rate and names a longer one, which holds minSamples all the more.
func TestLowRateSaysWhatToChange(t *testing.T) {
	const rate, minSamples = 5, 100
	s, ctx := startStackWithin(t, "bimodal4", 5*time.Minute)
	if _, err := s.ApplyPolicy(ctx, func(spec *tailcutv1alpha1.HedgePolicySpec) {
		spec.Delay.Auto.Window = &metav1.Duration{Duration: 15 * time.Second}
		spec.Delay.Auto.MinSamples = minSamples
	}); err != nil {
		t.Fatal(err)
	}
	traffic, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Go(func() { s.warmup(traffic, rate) })
	started := time.Now()

	advice := regexp.MustCompile(`raise delay\.auto\.window to (\S+) or more`)
	var window time.Duration
	for window == 0 {
		p, err := s.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived)
		// Once the window has filled (two of them, and a scrape), read the advice.
		if c != nil && c.Reason == tailcutv1alpha1.ReasonTooFewSamples && time.Since(started) > 32*time.Second {
			m := advice.FindStringSubmatch(c.Message)
			if m == nil {
				t.Fatalf("TooFewSamples without a window to set: %s", c.Message)
			}
			if window, err = time.ParseDuration(m[1]); err != nil {
				t.Fatalf("the advice's window %q: %v (%s)", m[1], err, c.Message)
			}
			t.Logf("after %s at %d requests/s: %s", time.Since(started).Round(time.Second), rate, c.Message)
		}
		if c != nil && c.Reason == tailcutv1alpha1.ReasonDerived {
			t.Fatalf("derived with a 15s window at %d requests/s and minSamples %d: %s", rate, minSamples, c.Message)
		}
		if time.Since(started) > 90*time.Second {
			t.Fatalf("no TooFewSamples advice within 90s; last: %+v", c)
		}
		time.Sleep(time.Second)
	}
	if held := window.Seconds() * rate; held < minSamples || window > time.Minute {
		t.Fatalf("advised window %s holds %.0f requests at %d/s: want at least minSamples %d, within 1m", window, held, rate, minSamples)
	}

	// Follow the advice.
	p, err := s.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.Delay.Auto.Window = &metav1.Duration{Duration: window}
	if err := s.Client.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	limit := window + 3*p.Spec.EffectiveEvaluationInterval() + 5*time.Second
	for {
		p, err := s.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived)
		if c != nil && c.Reason == tailcutv1alpha1.ReasonDerived && p.Status.DelaySource == tailcutv1alpha1.DelaySourcePrometheus {
			t.Logf("with window %s: derived %s after the change: %s", window, time.Since(applied).Round(time.Second), c.Message)
			return
		}
		if time.Since(applied) > limit {
			t.Fatalf("not derived within %s of setting window %s (the window, 3 evaluations, a scrape); last: %+v", limit, window, c)
		}
		time.Sleep(time.Second)
	}
}
