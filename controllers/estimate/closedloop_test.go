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
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/go-logr/logr"
	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// The closed loop: the estimator decides a delay every evaluation interval,
// the modelled Envoy hedges ordinary traffic with it, and the modelled
// Prometheus answers the next evaluation. Time is virtual, so the results do
// not depend on the machine. Every expectation comes from the model's own
// counters or from the latency distribution, never from the estimator.

// loop is one closed-loop run.
type loop struct {
	name     string
	rps      func(t time.Duration) float64
	latency  latencyModel
	duration time.Duration
	// policy adjusts the policy; nil leaves every default (window 2m,
	// evaluation every 30s, minSamples 100).
	policy func(*tailcutv1alpha1.HedgePolicy)
	seed   uint64
	// noAccount runs the data path as an Istio sidecar does: without
	// tailcut's hedge account (the hedge counters then count every slow
	// request) and with histograms flushed every 5s.
	noAccount bool
}

// localStack is the local stack's policy: a 30s window evaluated every 5s.
func localStack(p *tailcutv1alpha1.HedgePolicy) {
	p.Spec.Delay.Auto.Window = dur(30 * time.Second)
	p.Spec.Delay.Auto.StaleAfter = dur(time.Minute)
	p.Spec.Delay.Auto.MinSamples = 200
	p.Spec.EvaluationInterval = dur(5 * time.Second)
}

func constantRate(rps float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return rps }
}

// eval is one evaluation and what it left in status.
type eval struct {
	at     time.Duration
	delay  time.Duration
	res    Result
	status tailcutv1alpha1.HedgePolicyStatus
}

// served is one request as the data path saw it.
type served struct {
	at         time.Duration
	hedged     bool
	unhedgedMS float64 // the first attempt's latency: what the client gets without tailcut
	hedgedMS   float64 // what the client got
}

type loopRun struct {
	policy *tailcutv1alpha1.HedgePolicy
	evals  []eval
	reqs   []served
	prom   *simProm
}

func runLoop(t *testing.T, l loop) loopRun {
	t.Helper()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay.Auto.DeadbandPercent = tailcutv1alpha1.DefaultDeadbandPercent
	})
	if l.policy != nil {
		l.policy(p)
	}
	m := newEnvoyModel(plan.ClusterName(p.Namespace, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port), start)
	if l.noAccount {
		m.sidecarFlush = true
	} else {
		m.account = newHedgeAccount(float64(p.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100)
	}
	prom := &simProm{t: t, model: m}
	est := newPrometheus(prom, time.Second)
	// The production path: the sampler reads, Estimate decides from memory.
	due := make(chan event.GenericEvent, 4)
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*p}, nil
	}, due, logr.Discard())
	rng := rand.New(rand.NewPCG(l.seed, 7))
	interval := p.Spec.EffectiveEvaluationInterval()

	run := loopRun{policy: p, prom: prom}
	var delay time.Duration
	var evaluate func(at time.Duration)
	// As in production: the sampler ticks at its own pace, and a policy is
	// evaluated right after the tick at which the sampler says it is due.
	tick := tickFor(interval)
	step := func(at time.Duration) {
		now := start.Add(at)
		m.scrapeUntil(now)
		sampler.Tick(context.Background(), now)
		select {
		case <-due:
			evaluate(at)
		default:
		}
	}
	evaluate = func(at time.Duration) {
		now := start.Add(at)
		res, err := est.Estimate(context.Background(), p, now)
		if err != nil {
			t.Fatalf("%s at %s: %v", l.name, at, err)
		}
		checkInvariants(t, p, res)
		applyLikeController(p, res, now)
		delay = res.Delay
		run.evals = append(run.evals, eval{at: at, delay: delay, res: res, status: *p.Status.DeepCopy()})
	}
	next := time.Duration(0)
	for at := time.Duration(0); at < l.duration; {
		rate := l.rps(at)
		gap := time.Second
		if rate > 0 {
			gap = time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		}
		for next <= at+gap && next < l.duration {
			step(next)
			next += tick
		}
		at += gap
		if rate == 0 || at >= l.duration {
			continue
		}
		t1, t2 := l.latency(at, rng), l.latency(at, rng)
		d := float64(delay) / float64(time.Millisecond)
		hedged, got := m.record(start.Add(at), t1, t2, d, rng.Float64())
		run.reqs = append(run.reqs, served{at: at, hedged: hedged, unhedgedMS: t1, hedgedMS: got})
	}
	for _, q := range prom.seen {
		if !slices.Contains([]string{sampleBuckets, sampleCounters, sampleScraped, sampleEndpoints}, q) {
			t.Fatalf("%s: the estimator sent %q; it must send the sampler's four queries only", l.name, q)
		}
	}
	return run
}

// applyLikeController records a Result the way the reconciler does: Apply,
// then the DelayDerived condition, through a JSON-like precision loss of
// timestamps (the API server keeps whole seconds).
func applyLikeController(p *tailcutv1alpha1.HedgePolicy, res Result, now time.Time) {
	nowT := metav1.NewTime(now.Truncate(time.Second))
	res.Apply(&p.Status, nowT)
	cs := metav1.ConditionFalse
	if res.Derived {
		cs = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: tailcutv1alpha1.ConditionDelayDerived, Status: cs,
		Reason: res.DerivedReason, Message: res.Reason, ObservedGeneration: p.Generation, LastTransitionTime: nowT})
}

// share is hedges per request among reqs in [from, to).
func (r loopRun) share(from, to time.Duration) (float64, int) {
	n, h := 0, 0
	for _, q := range r.reqs {
		if q.at >= from && q.at < to {
			n++
			if q.hedged {
				h++
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(h) / float64(n), n
}

// p99 of the latency clients got (hedged) and would have got (unhedged).
func (r loopRun) p99(from, to time.Duration) (hedged, unhedged float64) {
	var hs, us []float64
	for _, q := range r.reqs {
		if q.at >= from && q.at < to {
			hs, us = append(hs, q.hedgedMS), append(us, q.unhedgedMS)
		}
	}
	return percentile(hs, 0.99), percentile(us, 0.99)
}

func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(math.Ceil(q*float64(len(v))))-1)]
}

// settled finds the delay the loop held most often over [from, to) (the
// mode, give or take 15%: adjacent histogram buckets are up to 12% apart), the
// first evaluation at or after from that reached it, and the share of the
// evaluations after that which stayed with it. A loop that reacts to a real
// breach of the budget for an interval still counts as settled.
func (r loopRun) settled(from, to time.Duration) (at, mode time.Duration, stayed float64) {
	near := func(d, m time.Duration) bool { return math.Abs(float64(d-m)) <= 0.15*float64(m) }
	best := 0
	for _, a := range r.evals {
		n := 0
		for _, b := range r.evals {
			if a.at >= from && a.at < to && b.at >= from && b.at < to && a.delay > 0 && near(b.delay, a.delay) {
				n++
			}
		}
		if n > best {
			best, mode = n, a.delay
		}
	}
	at = -1
	in, total := 0, 0
	for _, e := range r.evals {
		if e.at < from || e.at >= to {
			continue
		}
		if at < 0 && near(e.delay, mode) {
			at = e.at
		}
		if at >= 0 {
			total++
			if near(e.delay, mode) {
				in++
			}
		}
	}
	if total > 0 {
		stayed = float64(in) / float64(total)
	}
	return at, mode, stayed
}

func (r loopRun) delays(from, to time.Duration) []string {
	var out []string
	for _, e := range r.evals {
		if e.at >= from && e.at < to {
			s := "off"
			if e.delay > 0 {
				s = strings.TrimSuffix(e.delay.Round(100*time.Microsecond).String(), "0s")
			}
			out = append(out, s)
		}
	}
	return out
}

// firstDerived is when the first delay came from data.
func (r loopRun) firstDerived() (time.Duration, bool) {
	for _, e := range r.evals {
		if e.delay > 0 && e.res.Source == tailcutv1alpha1.DelaySourcePrometheus {
			return e.at, true
		}
	}
	return 0, false
}

// checkBudget asserts the budget promise over [from, to): the hedge share is
// at most budget + 1 point overall, and at most 1.5 x budget in every 30s
// window.
func checkBudget(t *testing.T, name string, r loopRun, from, to time.Duration) (overall float64, worst float64) {
	t.Helper()
	budget := float64(r.policy.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100
	overall, n := r.share(from, to)
	if n == 0 {
		t.Fatalf("%s: no requests in [%s, %s)", name, from, to)
	}
	if overall > budget+0.01 {
		t.Errorf("%s: hedge share %.2f%% over [%s, %s), want at most budget %.0f%% + 1 point", name, 100*overall, from, to, 100*budget)
	}
	for w := from; w+30*time.Second <= to; w += 30 * time.Second {
		s, _ := r.share(w, w+30*time.Second)
		worst = math.Max(worst, s)
		if s > 1.5*budget {
			t.Errorf("%s: hedge share %.2f%% in the 30s window at %s, want at most 1.5 x budget (%.1f%%)", name, 100*s, w, 150*budget)
		}
	}
	return overall, worst
}

// TestClosedLoopBudgetWhateverTheFastMode is issue #11's failure: the fast mode
// at 16.1ms put the delay inside it and hedged a quarter of all requests. For
// every fast mode from 15.0 to 17.0ms, under the local stack's policy and the
// default one, the delay settles above the fast mode within three evaluations
// of the first derivation and keeps the budget, and the tail is cut.
func TestClosedLoopBudgetWhateverTheFastMode(t *testing.T) {
	for _, pol := range []struct {
		name   string
		policy func(*tailcutv1alpha1.HedgePolicy)
		length time.Duration
	}{{"local stack", localStack, 4 * time.Minute}, {"defaults", nil, 12 * time.Minute}} {
		for i := range 63 {
			base, seed := 15.0+0.1*float64(i/3), uint64(i)
			name := fmt.Sprintf("%s, fast mode %.1fms, seed %d", pol.name, base, seed)
			r := runLoop(t, loop{name: name, rps: constantRate(150), latency: bimodalMS(base, 0.05), duration: pol.length,
				policy: pol.policy, seed: seed})
			interval := r.policy.Spec.EffectiveEvaluationInterval()
			first, ok := r.firstDerived()
			if !ok {
				t.Fatalf("%s: no delay derived: %s", name, r.evals[len(r.evals)-1].res.Reason)
			}
			// Issue #11: settled within 3 evaluation intervals once minSamples
			// are in (Envoy's histograms appear at its first 5s stats flush),
			// and held. A real burst of slow requests (one run here has a 30s
			// window with 6.2% of them) makes the budget guard raise the delay
			// until the floor expires a window later: 6 of 45 evaluations.
			minSamplesIn := time.Duration(float64(r.policy.Spec.EffectiveAuto().MinSamples) / 150 * float64(time.Second))
			settledAt, d, stayed := r.settled(first, pol.length)
			if settledAt < 0 || settledAt > minSamplesIn+3*interval || stayed < 0.8 {
				t.Errorf("%s: the delay reached %s at %s and stayed with it %.0f%% of the time, want within 3 evaluation intervals of minSamples (%s) and at least 80%%: %v",
					name, d, settledAt, 100*stayed, minSamplesIn, r.delays(0, pol.length))
			}
			ms := float64(d) / float64(time.Millisecond)
			if ms < base+1.5 || ms > base+10 {
				t.Errorf("%s: settled at %s, want above the fast mode (which ends near %.1fms) and far below the slow one", name, d, base+1.5)
			}
			overall, worst := checkBudget(t, name, r, settledAt, pol.length)
			h, u := r.p99(settledAt, pol.length)
			if h > 0.5*u {
				t.Errorf("%s: hedged p99 %.1fms, want at most half the unhedged %.1fms", name, h, u)
			}
			t.Logf("%s: delays %v; settled %s at %s (held %.0f%% after); hedge share %.2f%% (worst 30s %.2f%%); p99 %.1f -> %.1fms",
				name, r.delays(0, settledAt+interval), d, settledAt, 100*stayed, 100*overall, 100*worst, u, h)
		}
	}
}

// TestClosedLoopFollowsAShift moves the fast mode from 15 to 40ms for two
// minutes and back. The delay is above the new fast mode within two
// evaluations of the shift, the hedge share of the following 30s is back
// within 1.5 x budget, hedging never stops, and after the shift the delay
// returns below 25ms within four evaluations: two for the last two intervals
// to read the fast mode alone (recent.go), one step down, and one for what
// Envoy and Prometheus report late. Before recent.go it took a window more.
func TestClosedLoopFollowsAShift(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(*tailcutv1alpha1.HedgePolicy)
		from   time.Duration
		lasts  time.Duration
		back   time.Duration // the longest the return may take
		// noAccount: an Istio sidecar, which has no hedge account.
		noAccount bool
	}{
		{"local stack", localStack, 2 * time.Minute, 2 * time.Minute, 4 * 5 * time.Second, false},
		// As TestOrdinaryTraffic shifts: back before a window passed.
		{"local stack, 30s", localStack, 2 * time.Minute, 30 * time.Second, 4 * 5 * time.Second, false},
		{"defaults", nil, 5 * time.Minute, 2 * time.Minute, 4 * 30 * time.Second, false},
		// Without the account every slow request is hedged at the delay: 5%
		// slow under a 5% budget reads over it in some windows (seed 9: at the
		// return, 50.6 -> 75.9ms), and the budget floor then holds for a
		// window before the delay comes down.
		{"local stack, no hedge account", localStack, 2 * time.Minute, 2 * time.Minute, 30*time.Second + 4*5*time.Second, true},
	} {
		until := tc.from + tc.lasts
		length := until + tc.back + time.Minute
		r := runLoop(t, loop{name: tc.name, rps: constantRate(150), duration: length, policy: tc.policy, seed: 3, noAccount: tc.noAccount,
			latency: shiftMS(bimodalMS(15, 0.05), bimodalMS(40, 0.05), tc.from, until)})
		interval := r.policy.Spec.EffectiveEvaluationInterval()
		t.Logf("%s: delays around the shift %v", tc.name, r.delays(tc.from-interval, tc.from+4*interval))
		t.Logf("%s: delays after it %v", tc.name, r.delays(until, until+tc.back+interval))

		// The first evaluation at or after the shift, and the one after it.
		var followed time.Duration
		for _, e := range r.evals {
			if e.at >= tc.from && e.delay >= 42*time.Millisecond {
				followed = e.at
				break
			}
		}
		if followed == 0 || followed > tc.from+2*interval {
			t.Errorf("%s: the delay reached the shifted fast mode (>= 42ms) at %s, want within 2 evaluations of the shift at %s", tc.name, followed, tc.from)
		}
		budget := float64(r.policy.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100
		if s, _ := r.share(followed+interval, followed+interval+30*time.Second); s > 1.5*budget {
			t.Errorf("%s: hedge share %.2f%% in the 30s after following the shift, want at most %.1f%%", tc.name, 100*s, 150*budget)
		}
		checkBudget(t, tc.name+" (shifted)", r, followed+interval, until)
		// The way back mixes slow and fast requests in one reading, which
		// must not pass for queueing either.
		on, all := 0, 0
		for _, e := range r.evals {
			if e.at > followed {
				all++
				if e.delay > 0 {
					on++
				}
			}
		}
		if on < all {
			t.Errorf("%s: hedging ran at %d of %d evaluations during and after the shift, want all: following a shift is not stopping", tc.name, on, all)
		}
		// One hedge after a 45ms delay cannot beat about 86ms. With the hedge
		// account, whose window sits at its late threshold most of the time
		// when the slow share equals the budget, most hedges go out late, at
		// 1.5 x 45ms: about 108ms.
		most, why := 0.7, "one hedge after a 45ms delay cannot beat about 86ms"
		if !tc.noAccount {
			most, why = 0.8, "one late hedge after 1.5 x 45ms cannot beat about 108ms"
		}
		if h, u := r.p99(followed+interval, until); h > most*u {
			t.Errorf("%s: p99 during the shift %.1fms hedged against %.1fms unhedged, want at most %.1fx (%s)", tc.name, h, u, most, why)
		} else {
			t.Logf("%s: p99 during the shift %.1f -> %.1fms", tc.name, u, h)
		}

		var returned time.Duration
		for _, e := range r.evals {
			if e.at >= until && e.delay > 0 && e.delay < 25*time.Millisecond {
				returned = e.at
				break
			}
		}
		if returned == 0 || returned > until+tc.back {
			t.Errorf("%s: the delay came back below 25ms at %s, want by %s", tc.name, returned, until+tc.back)
		}
		checkBudget(t, tc.name+" (after)", r, returned, length)
	}
}

// TestClosedLoopLowRate is 5 requests per second with the default policy: a
// delay within two minutes, and the budget kept over the run.
func TestClosedLoopLowRate(t *testing.T) {
	r := runLoop(t, loop{name: "5 rps", rps: constantRate(5), latency: bimodalMS(15, 0.05), duration: 20 * time.Minute, seed: 11})
	first, ok := r.firstDerived()
	if !ok || first > 2*time.Minute {
		t.Fatalf("first delay at %s (derived: %v), want within 2 minutes; first reasons: %s", first, ok, r.evals[1].res.Reason)
	}
	overall, worst := checkBudgetOverall(t, "5 rps", r, first, 20*time.Minute)
	h, u := r.p99(first, 20*time.Minute)
	t.Logf("5 rps: first delay at %s; delays %v; hedge share %.2f%% (worst 30s %.2f%%); p99 %.1f -> %.1fms",
		first, r.delays(0, 20*time.Minute), 100*overall, 100*worst, u, h)
}

// checkBudgetOverall is checkBudget without the 30s windows, which hold 150
// requests at 5 rps: a 30s share then moves by 2 points with one request.
func checkBudgetOverall(t *testing.T, name string, r loopRun, from, to time.Duration) (float64, float64) {
	t.Helper()
	budget := float64(r.policy.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100
	overall, _ := r.share(from, to)
	if overall > budget+0.01 {
		t.Errorf("%s: hedge share %.2f%%, want at most budget + 1 point", name, 100*overall)
	}
	worst := 0.0
	for w := from; w+2*time.Minute <= to; w += 2 * time.Minute {
		s, _ := r.share(w, w+2*time.Minute)
		worst = math.Max(worst, s)
	}
	return overall, worst
}

// TestClosedLoopNoTraffic: no request at all says so at every evaluation, in
// the same words, with hedging off; when traffic stops after a delay was
// derived, the last good delay is kept for staleAfter and then the fallback
// applies: one change, no flapping.
func TestClosedLoopNoTraffic(t *testing.T) {
	idle := runLoop(t, loop{name: "idle", rps: constantRate(0), latency: bimodalMS(15, 0.05), duration: 10 * time.Minute, seed: 1})
	reasons := map[string]bool{}
	for _, e := range idle.evals[1:] {
		if e.delay != 0 || e.res.DerivedReason != tailcutv1alpha1.ReasonNoTraffic || e.res.Derived {
			t.Fatalf("idle at %s: delay %s, %s (derived %v): %s", e.at, e.delay, e.res.DerivedReason, e.res.Derived, e.res.Reason)
		}
		reasons[e.res.Reason] = true
	}
	if len(reasons) != 1 {
		t.Errorf("idle: the reason changed between evaluations: %v", reasons)
	}
	t.Logf("idle: %s", idle.evals[len(idle.evals)-1].res.Reason)

	stopAt := 4 * time.Minute
	stops := runLoop(t, loop{name: "stops", latency: bimodalMS(15, 0.05), duration: 15 * time.Minute, seed: 2,
		rps: func(t time.Duration) float64 {
			if t < stopAt {
				return 150
			}
			return 0
		}})
	var transitions []string
	for i := 1; i < len(stops.evals); i++ {
		a, b := stops.evals[i-1], stops.evals[i]
		if b.at > stopAt && (a.res.Source != b.res.Source || a.delay != b.delay) {
			transitions = append(transitions, fmt.Sprintf("%s: %s %s -> %s %s", b.at, a.res.Source, a.delay, b.res.Source, b.delay))
		}
	}
	last := stops.evals[len(stops.evals)-1]
	if last.delay != 0 || last.res.DerivedReason != tailcutv1alpha1.ReasonNoTraffic {
		t.Errorf("traffic stopped 11 minutes ago: delay %s, %s: %s", last.delay, last.res.DerivedReason, last.res.Reason)
	}
	if len(transitions) > 2 {
		t.Errorf("after traffic stopped the decision changed %d times, want LastKnown then the fallback: %v", len(transitions), transitions)
	}
	t.Logf("stops: %v; finally: %s", transitions, last.res.Reason)
}

// TestClosedLoopOtherShapes covers the other scenarios of make bench-tail that a
// model reproduces: 3% slow, and a smooth lognormal tail, whose 95th percentile
// (45.6ms for median 20ms, sigma 0.5) the delay must sit close above.
func TestClosedLoopOtherShapes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		latency  latencyModel
		min, max time.Duration
	}{
		{"bimodal 3%", bimodalMS(15, 0.03), 16500 * time.Microsecond, 25 * time.Millisecond},
		{"lognormal", lognormalMS(20, 0.5), 45 * time.Millisecond, 57 * time.Millisecond},
	} {
		r := runLoop(t, loop{name: tc.name, rps: constantRate(150), latency: tc.latency, duration: 6 * time.Minute, policy: localStack, seed: 5})
		first, _ := r.firstDerived()
		at, d, stayed := r.settled(first, 6*time.Minute)
		if d < tc.min || d > tc.max || stayed < 0.9 {
			t.Errorf("%s: settled at %s (held %.0f%%), want in [%s, %s]: %v", tc.name, d, 100*stayed, tc.min, tc.max, r.delays(0, time.Minute))
		}
		overall, worst := checkBudget(t, tc.name, r, at, 6*time.Minute)
		h, u := r.p99(at, 6*time.Minute)
		t.Logf("%s: settled %s at %s; hedge share %.2f%% (worst 30s %.2f%%); p99 %.1f -> %.1fms", tc.name, d, at, 100*overall, 100*worst, u, h)
	}
}
