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
	"context"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// TestAnAckReusesTheDecision is #25's first promise: a reconcile that brings
// nothing new, as a proxy's ACK of the last push does, reports the decision
// in force and takes no other. The estimator runs as in production (the
// sampler reads a simulated Envoy scraped by Prometheus; Estimate decides
// from its memory). Between the evaluations the sampler makes due, five
// ACK-like reconciles a second apart each get the last decision back, with
// the decision's time unchanged; the due evaluations take new ones, and so
// does a spec change.
func TestAnAckReusesTheDecision(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.EvaluationInterval = dur(10 * time.Second)
		p.Spec.Delay.Auto.Window = dur(30 * time.Second)
	})
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	m := newEnvoyModel(plan.ClusterName(p.Namespace, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port), start)
	m.account = newHedgeAccount(0.05)
	prom := &simProm{t: t, model: m}
	est := &Prometheus{api: prom, timeout: time.Second}
	due := make(chan event.GenericEvent, 4)
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*p}, nil
	}, due, logr.Discard())
	rng := rand.New(rand.NewPCG(1, 2))
	tick := tickFor(p.Spec.EffectiveEvaluationInterval())
	decisionAt := func() time.Time {
		est.decided.mu.Lock()
		defer est.decided.mu.Unlock()
		return est.decided.by[key].at
	}
	var delay time.Duration
	var decisions, reused int
	evaluate := func(now time.Time) Result {
		res, err := est.Estimate(context.Background(), p, now)
		if err != nil {
			t.Fatal(err)
		}
		applyLikeController(p, res, now)
		delay = res.Delay
		return res
	}
	nextTick := time.Duration(0)
	for at := time.Duration(0); at < 3*time.Minute; at += 10 * time.Millisecond {
		// 100 requests a second, 4% of them 100 ms slower.
		latency := func() float64 {
			if rng.Float64() < 0.04 {
				return 115
			}
			return 15
		}
		m.record(start.Add(at), latency(), latency(), float64(delay)/float64(time.Millisecond), rng.Float64())
		if at < nextTick {
			continue
		}
		nextTick += tick
		now := start.Add(at)
		m.scrapeUntil(now)
		sampler.Tick(context.Background(), now)
		select {
		case <-due:
		default:
			continue
		}
		evaluate(now)
		decisions++
		last, taken := decisionAt(), *p.Status.DeepCopy()
		if !last.Equal(now) {
			t.Fatalf("at %s the due evaluation took no decision (last at %s)", at, last.Sub(start))
		}
		for ack := 1; ack <= 5; ack++ {
			later := now.Add(time.Duration(ack) * time.Second)
			res, err := est.Estimate(context.Background(), p, later)
			if err != nil {
				t.Fatal(err)
			}
			if decisionAt() != last {
				t.Fatalf("an ACK %ds after the evaluation at %s took a new decision", ack, at)
			}
			before := taken.DeepCopy()
			applyLikeController(p, res, later)
			if p.Status.EffectiveDelay != nil && !reflect.DeepEqual(p.Status.EffectiveDelay, before.EffectiveDelay) ||
				p.Status.DelayReason != before.DelayReason || !reflect.DeepEqual(p.Status.LastDelayChange, before.LastDelayChange) {
				t.Fatalf("an ACK %ds after the evaluation at %s changed the status: %s -> %s", ack, at, before.DelayReason, p.Status.DelayReason)
			}
			reused++
		}
	}
	if decisions < 15 || delay == 0 {
		t.Fatalf("%d due evaluations in 3 minutes at a 10 s interval, delay %s; want about 18, and a delay", decisions, delay)
	}
	p.Generation++
	p.Spec.Delay.Auto.Quantile = 0.9
	now := start.Add(3*time.Minute + 500*time.Millisecond)
	evaluate(now)
	if !decisionAt().Equal(now) {
		t.Errorf("a spec change took no new decision")
	}
	t.Logf("%d decisions at the sampler's pace, %d ACKs answered with the decision in force; delay %s", decisions, reused, delay)
}
