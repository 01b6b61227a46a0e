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
// ackWorld runs the estimator as in production: a sampler reads a simulated
// Envoy scraped by Prometheus, 100 requests a second, 4% of them 100 ms
// slower, and Estimate decides from its memory.
type ackWorld struct {
	t       *testing.T
	p       *tailcutv1alpha1.HedgePolicy
	est     *Prometheus
	sampler *Sampler
	model   *envoyModel
	due     chan event.GenericEvent
	start   time.Time
	delay   time.Duration
}

func newAckWorld(t *testing.T) *ackWorld {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.UID = "policy-1"
		p.Spec.EvaluationInterval = dur(10 * time.Second)
		p.Spec.Delay.Auto.Window = dur(30 * time.Second)
	})
	m := newEnvoyModel(plan.ClusterName(p.Namespace, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port), start)
	m.account = newHedgeAccount(0.05)
	est := newPrometheus(&simProm{t: t, model: m}, time.Second)
	due := make(chan event.GenericEvent, 4)
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*p}, nil
	}, due, logr.Discard())
	return &ackWorld{t: t, p: p, est: est, sampler: sampler, model: m, due: due, start: start}
}

// evaluate is a reconcile at now: the estimate, applied to status as the
// controller applies it.
func (w *ackWorld) evaluate(now time.Time) Result {
	res, err := w.est.Estimate(context.Background(), w.p, now)
	if err != nil {
		w.t.Fatal(err)
	}
	applyLikeController(w.p, res, now)
	w.delay = res.Delay
	return res
}

// run serves traffic for d, ticks the sampler, and calls onDue at each
// evaluation the sampler makes due, after it; onDue returns false to stop.
func (w *ackWorld) run(d time.Duration, onDue func(at time.Duration, now time.Time) bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	tick := tickFor(w.p.Spec.EffectiveEvaluationInterval())
	nextTick := time.Duration(0)
	for at := time.Duration(0); at < d; at += 10 * time.Millisecond {
		latency := func() float64 {
			if rng.Float64() < 0.04 {
				return 115
			}
			return 15
		}
		w.model.record(w.start.Add(at), latency(), latency(), float64(w.delay)/float64(time.Millisecond), rng.Float64())
		if at < nextTick {
			continue
		}
		nextTick += tick
		now := w.start.Add(at)
		w.model.scrapeUntil(now)
		w.sampler.Tick(context.Background(), now)
		select {
		case <-w.due:
		default:
			continue
		}
		if !onDue(at, now) {
			return
		}
	}
}

// decisionAt is when the estimator took its last decision for the policy.
func (w *ackWorld) decisionAt() time.Time {
	w.est.decided.mu.Lock()
	defer w.est.decided.mu.Unlock()
	return w.est.decided.by[types.NamespacedName{Namespace: w.p.Namespace, Name: w.p.Name}].at
}

// TestAnAckReusesTheDecision is #25's first promise: a reconcile that brings
// nothing new, as a proxy's ACK of the last push does, reports the decision
// in force and takes no other. Between the evaluations the sampler makes
// due, five ACK-like reconciles a second apart each get the last decision
// back, with the decision's time unchanged; the due evaluations take new
// ones, and so does a spec change.
func TestAnAckReusesTheDecision(t *testing.T) {
	w := newAckWorld(t)
	p := w.p
	var decisions, reused int
	w.run(3*time.Minute, func(at time.Duration, now time.Time) bool {
		w.evaluate(now)
		decisions++
		last, taken := w.decisionAt(), *p.Status.DeepCopy()
		if !last.Equal(now) {
			t.Fatalf("at %s the due evaluation took no decision (last at %s)", at, last.Sub(w.start))
		}
		for ack := 1; ack <= 5; ack++ {
			later := now.Add(time.Duration(ack) * time.Second)
			res, err := w.est.Estimate(context.Background(), p, later)
			if err != nil {
				t.Fatal(err)
			}
			if w.decisionAt() != last {
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
		return true
	})
	delay := w.delay
	if decisions < 15 || delay == 0 {
		t.Fatalf("%d due evaluations in 3 minutes at a 10 s interval, delay %s; want about 18, and a delay", decisions, delay)
	}
	p.Generation++
	p.Spec.Delay.Auto.Quantile = 0.9
	now := w.start.Add(3*time.Minute + 500*time.Millisecond)
	w.evaluate(now)
	if !w.decisionAt().Equal(now) {
		t.Errorf("a spec change took no new decision")
	}
	t.Logf("%d decisions at the sampler's pace, %d ACKs answered with the decision in force; delay %s", decisions, reused, delay)
}

// TestAStaleStatusCannotUndoADecision: the estimator decides from its own
// memory of the delay in force, not from the status it is handed. A
// reconcile that reads the policy from a cache that has not seen the last
// delay change yet (the status from before it) and must decide anew (here a
// spec change) keeps the new delay and the time it changed: the change is
// held for an evaluation interval, as it would be with the fresh status.
// Deciding from the stale status swung the delay 20.9 -> 31.4 -> 20.9 ms in
// the kind e2e.
func TestAStaleStatusCannotUndoADecision(t *testing.T) {
	w := newAckWorld(t)
	var changed bool
	w.run(3*time.Minute, func(at time.Duration, now time.Time) bool {
		before := w.p.Status.DeepCopy()
		res := w.evaluate(now)
		var was time.Duration
		if before.EffectiveDelay != nil {
			was = before.EffectiveDelay.Duration
		}
		if res.Delay == was {
			return true
		}
		changed = true
		stale := w.p.DeepCopy()
		stale.Status = *before
		stale.Generation++
		stale.Spec.Delay.Auto.DeadbandPercent++
		later := now.Add(time.Second)
		again, err := w.est.Estimate(context.Background(), stale, later)
		if err != nil {
			t.Fatal(err)
		}
		if !w.decisionAt().Equal(later) {
			t.Fatalf("the spec change took no new decision")
		}
		if again.Delay != res.Delay || again.LastDelayChange == nil || !again.LastDelayChange.Time.Equal(now) {
			t.Errorf("decided from a status older than the change at %s: delay %s (changed %v), want %s changed at %s; %s",
				at, again.Delay, again.LastDelayChange, res.Delay, now.Format(time.TimeOnly), again.Reason)
		}
		t.Logf("the delay changed %s -> %s at %s; a stale read a second later decided %s: %s",
			was, res.Delay, at, again.Delay, again.Reason)
		return false
	})
	if !changed {
		t.Fatal("the delay never changed in 3 minutes")
	}
}

// TestAutoAfterStaticStartsFromTheDelayInForce: while a policy is Static (or
// suspended) its delay is not the estimator's, and when it turns Auto again
// the next decision starts from what is in force, as status reports it, not
// from the estimator's older decision.
func TestAutoAfterStaticStartsFromTheDelayInForce(t *testing.T) {
	w := newAckWorld(t)
	p := w.p
	w.run(3*time.Minute, func(at time.Duration, now time.Time) bool {
		if w.evaluate(now).Delay == 0 {
			return true
		}
		p.Generation++
		p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: dur(40 * ms)}
		if res := w.evaluate(now.Add(time.Second)); res.Delay != 40*ms {
			t.Fatalf("Static 40ms: got %s (%s)", res.Delay, res.Reason)
		}
		p.Generation++
		p.Spec.Delay = testPolicy().Spec.Delay
		res := w.evaluate(now.Add(2 * time.Second))
		if res.Delay != 40*ms {
			t.Errorf("Auto again a second after the static delay came in force: got %s, want 40ms held (%s)", res.Delay, res.Reason)
		}
		return false
	})
}
