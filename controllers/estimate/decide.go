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
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// How the delay keeps to the budget.
//
// Target: the shortest delay whose measured tail is not significantly above
// tau*(1+budgetSlack) (histogram.go; selectZ standard errors of a binomial
// share at that limit, at the reading's sample size), plus delayMargin. The
// slack (5% of the budget: 5.25% for a 5% budget) lets the delay sit just
// above a fast mode when the slow share equals
// the budget (a 5% step under a 5% budget), where no delay below the slow mode
// has a tail of exactly 5% or less, and the sampling allowance keeps a first
// reading of a few hundred requests from taking a 6% sample of a 5% slow
// share for a reason to wait for the slow mode. Where a delay within the late
// delay leaves the hedge account room, it is read there instead, and where a
// slow mode as large as the budget leaves none, where the fast mode's
// stragglers end (headroom.go); neither adds the margin. The margin keeps the
// noise in the tail reading from putting the delay inside the fast mode. The
// budget guard below measures what the delay really costs.
//
// Budget: what the delay asks for is the share of requests slower than it.
// The hedge counters measured it exactly until tailcut's Envoy got its hedge
// account, which holds hedges near the budget and whose held-back hedges
// Envoy counts nowhere; the histogram proves a lower bound of it (cdf.beyond).
// When either is over the budget (overBudget) the delay rises at this
// evaluation, to the lower bound the hedged histogram gives for the quantile,
// or by maxStepPercent when the hedge counters are over (no account held
// them), by deadbandPercent when only the histogram is. A lower bound read
// among the hedges' answers (past the delay plus the fastest answer) while
// at most rationedFactor x the budget's share is that slow is no reason to
// rise further: those requests are slow at any delay up to there, the
// account rations their hedges, and a higher delay only answers them later.
// The delay in force then becomes the budget floor, which holds for one
// window: no target at or below it is programmed. At max, hedging pauses.
//
// Hedging hurts: when slowness is shared (saturation), hedges add load exactly
// when there is none to spare, and the latency rises with the hedge rate.
// Queueing spreads the distribution: requests that find a free server still
// take the service time, so the 10th percentile stays while the median climbs.
// A service that simply got slower (a deploy, another traffic mix) moves the
// whole distribution instead, and the delay must follow it, not stop. So while
// hedges are a real share of the traffic (at least hurtsMinShare of the
// budget), the median rose by hurtsRise against the window before, and the
// 10th percentile rose by less than hurtsLowRise, over the span and over each
// of the last two evaluation intervals alone, hedging pauses. A span that
// straddles a shift mixes fast and slow requests into the same picture, and
// so can one interval (Envoy and Prometheus report seconds late); the
// interval next to it is all slow or all fast. A pause holds
// for max(window, 2*evaluationInterval), or until the spec changes, then the
// delay is derived afresh. The budget guard runs first: a delay left inside a
// shifted fast mode is over budget, and raising it is the cure.
const (
	budgetSlack = 0.05
	delayMargin = 0.10
	selectZ     = 2.0
	// rationedFactor: while at most this many times the budget's share of
	// requests runs past where the hedges' answers begin (the delay plus the
	// fastest answer), the hedge account rations them and the budget guard
	// raises the delay by the deadband; more than that is a shift of the
	// whole distribution, and the delay goes to the lower bound at once.
	rationedFactor = 2.0
	// firstSelectZ is the allowance of a first delay, read with hedging off
	// from fewer than firstFewSamples requests. Erring high there costs the
	// tail for several evaluations (the delay comes down by maxStepPercent at
	// a time: 143 -> 18.7ms took 15s in one closed-loop run, a 1-in-100
	// sample of about 800 requests); erring low costs little: Envoy's hedge
	// account caps the extra load, and the next reading, from more requests,
	// measures it.
	firstSelectZ    = 3.0
	firstFewSamples = 2000
	overZ           = 2.0

	hurtsMinShare = 0.5
	hurtsRise     = 1.5
	hurtsLowRise  = 1.2
	// hurtsMinRise ignores rises of the median too small to matter.
	hurtsMinRise = 0.002
	// delayResolution rounds derived delays up so status stays readable.
	delayResolution = 100 * time.Microsecond
)

// decide turns one evaluation's readings and the previous decision (the
// policy's status) into a Result. It is pure: time is now, memory is status.
func decide(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, sp span, r readings, now time.Time) Result {
	spec, st := &policy.Spec, &policy.Status
	budget := spec.EffectiveBudget().MaxExtraLoadPercent
	nowT := metav1.NewTime(now)
	cur := sp.delay
	floor := activeFloor(st, auto, now)

	if sp.hold != "" {
		return held(policy, auto, floor)
	}
	var hedgeRate *tailcutv1alpha1.HedgeRateObservation
	hedgeNote := "hedge rate unknown (" + r.hedgeNote + ")"
	if r.hedge != nil {
		pct := r.hedge.percent()
		since := metav1.NewTime(sp.since)
		hedgeRate = &tailcutv1alpha1.HedgeRateObservation{Percent: math.Round(pct*100) / 100, BudgetPercent: budget,
			Requests: int64(math.Round(r.hedge.requests)), Since: &since, SampledAt: nowT}
		at := "with hedging off"
		if cur > 0 {
			hedgeRate.Delay = &metav1.Duration{Duration: cur}
			at = "at " + cur.String()
		}
		hedgeNote = fmt.Sprintf("hedge rate %.2f%% of %d%% budget %s over %.0f requests", pct, budget, at, r.hedge.requests)
	}
	attach := func(res Result) Result {
		res.HedgeRate, res.Floor = hedgeRate, floor
		return res
	}
	paused := func(reason, why string) Result {
		return attach(Result{Source: tailcutv1alpha1.DelaySourceNone, Derived: true, DerivedReason: reason,
			Reason: fmt.Sprintf("hedging paused (%s): %s", reason, why)})
	}

	// A pause holds whatever the data says, so hedging does not flap.
	if reason, until, ok := pausedUntil(policy, auto); ok && now.Before(until) {
		return paused(reason, fmt.Sprintf("since %s, resumes after %s; %s",
			st.LastDelayChange.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), hedgeNote))
	}
	if r.fail != nil {
		return attach(withoutData(policy, auto, r.fail, now))
	}

	// The delay the data asks for, in seconds.
	tau := 1 - math.Max(auto.Quantile, 1-float64(budget)/100)
	qName := quantileName(1 - tau)
	var (
		target, lowerBound float64
		basis, rationed    string
		recent             string
		quantile           *tailcutv1alpha1.QuantileObservation
		// samples and over are what the delay was read from: the span,
		// or the last two intervals (recent.go).
		samples, over = r.samples, promDuration(sp.rng)
	)
	observe := func(v float64, lower bool) {
		quantile = &tailcutv1alpha1.QuantileObservation{Quantile: 1 - tau, Value: metav1.Duration{Duration: roundUp(v)},
			LowerBound: lower, Samples: int64(math.Round(samples)), SampledAt: nowT}
	}
	switch {
	case r.cdf == nil && r.thin == "":
		if nd := checkQuantile(r.quantile, auto.Max.Duration); nd != nil {
			return attach(withoutData(policy, auto, nd, now))
		}
		target = r.quantile
		basis = fmt.Sprintf("custom query %s over %s is %s", quantileName(auto.Quantile), promDuration(auto.Window.Duration), roundUp(r.quantile))
		observe(r.quantile, false)
	case r.thin != "" && st.DelaySource != tailcutv1alpha1.DelaySourcePrometheus:
		// Nothing derived yet: the delay in force is the fallback (or a
		// last good delay going stale), and a reading too thin to read
		// must not pass it off as derived. In the kind e2e a fallback of
		// 50ms became source Prometheus when Prometheus first scraped a
		// proxy that had served 8,920 requests before it.
		return attach(withoutData(policy, auto, newNoData(tailcutv1alpha1.ReasonTooFewSamples, "%s", r.thin), now))
	case r.thin != "":
		target, basis = cur.Seconds(), r.thin
	default:
		limit := tau * (1 + budgetSlack)
		z := selectZ
		if cur == 0 && r.samples < firstFewSamples {
			z = firstSelectZ
		}
		d, tail, ok := r.cdf.shortest(limit+z*math.Sqrt(limit*(1-limit)/r.samples), r.edge)
		if !ok {
			return attach(withoutData(policy, auto, newNoData(tailcutv1alpha1.ReasonQuantileInfinite,
				"more than %.1f%% of requests took longer than the histogram's last finite bucket", 100*tau*(1+budgetSlack)), now))
		}
		if dr, tr, n, why, ok := recentReading(r, d, limit, z, sp.censorAt, auto.MinSamples, auto.DeadbandPercent); ok {
			d, tail, samples, over, recent = dr, tr, n, "the last two evaluation intervals", why
		}
		if nd := checkQuantile(d, auto.Max.Duration); nd != nil {
			return attach(withoutData(policy, auto, nd, now))
		}
		if why, ok := outOfReach(r, d, tau, budget); ok && d <= sp.censorAt*(1+1e-9) {
			observe(d, false)
			res := attach(Result{Source: tailcutv1alpha1.DelaySourceNone, Derived: false, DerivedReason: tailcutv1alpha1.ReasonTailOutOfReach,
				Reason: fmt.Sprintf("hedging off (%s): %s; %s", tailcutv1alpha1.ReasonTailOutOfReach, why, hedgeNote)})
			res.Quantile = quantile
			return res
		}
		if d <= sp.censorAt*(1+1e-9) {
			margin := delayMargin
			basis = fmt.Sprintf("%.2f%% of %.0f requests over %s took longer than %s (%s)", 100*tail, samples, over, roundUp(d), qName)
			observe(d, false)
			// A recent reading comes from fewer requests than the span's
			// histogram that headroom reads, and the delay is on its way down.
			if recent == "" {
				exactTo := sp.censorAt + r.cdf.fastest()
				if dh, th, ok := headroom(r.cdf, r.edge, d, tau, exactTo); ok {
					if dh > d {
						basis += fmt.Sprintf("; %.2f%% took longer than %s, at most %.0f%% of the budget's share: read there, so that the hedge account need not ration",
							100*th, roundUp(dh), 100*headroomShare)
					} else {
						basis += fmt.Sprintf(", at most %.0f%% of the budget's share: the hedge account need not ration", 100*headroomShare)
					}
					d, margin = dh, 0
				} else if dk, stragglers, ok := knee(r.cdf, r.edge, d, tau, exactTo); ok {
					if dk > d {
						basis += fmt.Sprintf("; %.2f%% more than the slow mode took longer than %s, at most %.0f%% of the budget's share: read there, where the fast mode's stragglers end",
							100*stragglers, roundUp(dk), 100*kneeShare)
					} else {
						basis += fmt.Sprintf(", %.2f%% more than the slow mode, at most %.0f%% of the budget's share: the fast mode's stragglers end there",
							100*stragglers, 100*kneeShare)
					}
					d, margin = dk, 0
				}
			}
			target = d * (1 + margin)
			if margin > 0 {
				basis += fmt.Sprintf(", +%.0f%% margin", 100*margin)
			}
		} else {
			// The quantile is at least d: never a reason to go down, and a
			// reason to go up (within the step limit) even without counters
			// once d clears the delay by more than the deadband; closer than
			// that, adjacent buckets would make the delay flip between them.
			target, lowerBound = cur.Seconds(), d
			exact := sp.censorAt + r.cdf.fastest()
			if slow := r.cdf.beyond(exact, r.edge); d > exact && slow <= rationedFactor*tau {
				// d lies among the hedges' answers. Requests that slow
				// were slow at any delay up to there: raising the delay
				// into them asks no less of the account and answers them
				// later (18.7 -> 37.4ms in the local e2e, whose late
				// hedges then came at 56ms). The budget guard raises by
				// the deadband instead.
				lowerBound = 0
				rationed = fmt.Sprintf("%.2f%% of requests took longer than %s, where the hedges' answers begin: within %gx the budget, the hedge account rations them",
					100*slow, roundUp(exact), rationedFactor)
			} else if d > cur.Seconds()*(1+float64(auto.DeadbandPercent)/100) {
				target = d * (1 + delayMargin)
			}
			basis = fmt.Sprintf("%s is above the delay in force (at least %s by the hedged latency over %s)",
				qName, roundUp(d), promDuration(sp.rng))
			observe(d, true)
		}
	}
	attach = func(res Result) Result {
		res.HedgeRate, res.Floor, res.Quantile = hedgeRate, floor, quantile
		return res
	}
	code := tailcutv1alpha1.ReasonDerived
	notes := []string{hedgeNote}
	if rationed != "" {
		notes = append(notes, rationed)
	}
	if recent != "" {
		notes = append(notes, recent)
	}

	// The hedge account in Envoy holds hedges to the budget, so the hedge
	// counters stay near it whatever the delay, and Envoy counts the hedges
	// it held back nowhere. The share of requests that ran past the delay
	// says what the delay asks for, as the counters did before the account.
	// Over the budget, the account holds back hedges of slow requests as
	// well as of the fast mode's tail, and the tail is not cut.
	passed, passedOver := 0.0, false
	if cur > 0 && r.cdf != nil {
		passed = r.cdf.beyond(cur.Seconds(), r.edge)
		passedOver = overBudget(passed, r.samples, budget)
	}
	forced := false
	if cur > 0 && (passedOver || (r.hedge != nil && r.hedge.over(budget))) {
		pct := 100 * passed
		if r.hedge != nil {
			pct = math.Max(pct, r.hedge.percent())
		}
		if passedOver {
			hedgeNote += fmt.Sprintf("; %.2f%% of %.0f requests ran past the delay", 100*passed, r.samples)
		}
		// The floor and the pause hold for a window, so they take a breach
		// beyond one tick's burst; the raise does not.
		lasting := (r.hedge != nil && r.hedge.over(budget)) || r.overWithoutOnePart(cur.Seconds(), budget)
		if lasting {
			floor = &tailcutv1alpha1.BudgetFloor{Delay: metav1.Duration{Duration: cur}, Percent: math.Round(pct*100) / 100, MeasuredAt: nowT}
		} else {
			hedgeNote += "; over in one tick's scrapes only: no budget floor"
		}
		if cur >= auto.Max.Duration && lasting {
			return paused(tailcutv1alpha1.ReasonBudgetExceeded, fmt.Sprintf("%s with the delay already at max %s", hedgeNote, auto.Max.Duration))
		}
		code, forced = tailcutv1alpha1.ReasonBudgetExceeded, true
		// Hedges over the budget: up by the step limit at once. Only the
		// histogram over it: the hedge account holds the hedges to the
		// budget and sends the last ones late, so the delay goes up to what
		// the histogram proves, or by the deadband, not by a guess. A step
		// of 50% there (20.9 -> 31.4ms in the kind e2e, on a delay the next
		// reading took back to 23.1ms) lengthened the hedged tail for an
		// interval each time noise crossed the line.
		step := float64(auto.DeadbandPercent) / 100
		if r.hedge != nil && r.hedge.over(budget) {
			step = float64(auto.MaxStepPercent) / 100
		}
		raised := math.Max(cur.Seconds()*(1+step), lowerBound*(1+delayMargin))
		target = math.Max(target, raised)
		notes[0] = hedgeNote
		notes = append(notes, fmt.Sprintf("over budget: raising from %s", cur))
	} else if cur > 0 && r.hedge != nil {
		pct := r.hedge.percent()
		if r.prev != nil && r.last != nil && r.earlier != nil && r.cdf != nil && pct >= hurtsMinShare*float64(budget) && r.prev.total() >= float64(auto.MinSamples) {
			if spread(r.prev, r.cdf) && spread(r.prev, r.last) && spread(r.prev, r.earlier) {
				return paused(tailcutv1alpha1.ReasonHedgingHurts, fmt.Sprintf(
					"median latency rose from %s to %s while hedging, the 10th percentile stayed near %s: queueing, not a slower service; %s",
					roundUp(r.prev.quantile(0.5)), roundUp(r.cdf.quantile(0.5)), roundUp(r.cdf.quantile(0.1)), hedgeNote))
			}
		}
	}
	// Compared as the delay it would become: 19ms + 10% is a hair above
	// 20.9ms in floats, and rounded it sat on a 20.9ms floor.
	if floor != nil && roundUp(target) <= floor.Delay.Duration {
		target = floor.Delay.Seconds() * (1 + delayMargin)
		notes = append(notes, fmt.Sprintf("kept above the budget floor %s (%.2f%% hedged there at %s)",
			floor.Delay.Duration, floor.Percent, floor.MeasuredAt.UTC().Format(time.RFC3339)))
	}
	targetD := clamp(roundUp(target), auto)

	delay := targetD
	if cur > 0 {
		// Above the budget, even within its noise, a higher target is taken
		// whatever the deadband: the budget is a promise, and the deadband
		// only keeps the delay from flipping between adjacent buckets. (The
		// saturation e2e held 23.1ms at 5.82% hedged, target 25.3ms.)
		over := r.hedge != nil && r.hedge.percent() > float64(budget)
		delay, notes = stabilize(st, auto, spec.EffectiveEvaluationInterval(), cur, targetD, forced, over, now, notes)
	}
	return attach(Result{
		Delay: delay, Target: targetD, Source: tailcutv1alpha1.DelaySourcePrometheus,
		Derived: true, DerivedReason: code,
		Reason: fmt.Sprintf("delay %s: %s; %s", delay, basis, strings.Join(notes, "; ")),
	})
}

// spread says whether now looks like before with queueing added: the median
// rose by hurtsRise (and hurtsMinRise) while the 10th percentile stayed.
func spread(before, now *cdf) bool {
	p50, prev50 := now.quantile(0.5), before.quantile(0.5)
	return p50 >= hurtsRise*prev50 && p50-prev50 >= hurtsMinRise && now.quantile(0.1) < hurtsLowRise*before.quantile(0.1)
}

// stabilize applies the deadband, the step limit and one change per
// evaluation interval to a move from cur to target. A forced move (over
// budget) skips the deadband and the step limit: it only ever raises the
// delay, to a value the evidence asks for. When overBudget, a move up skips
// the deadband. The result is within [min, max] even when cur is not (the
// spec changed).
func stabilize(st *tailcutv1alpha1.HedgePolicyStatus, auto *tailcutv1alpha1.AutoDelay, interval, cur, target time.Duration,
	forced, overBudget bool, now time.Time, notes []string) (time.Duration, []string) {
	c := clamp(cur, auto)
	var delay time.Duration
	deadband := float64(auto.DeadbandPercent) / 100
	step := float64(auto.MaxStepPercent) / 100
	switch {
	case forced:
		delay = target
	case math.Abs(float64(target-c)) < deadband*float64(c) && (!overBudget || target <= c):
		delay = c
		if target != c {
			notes = append(notes, fmt.Sprintf("held at %s: target %s is within the %d%% deadband", c, target, auto.DeadbandPercent))
		}
	default:
		lo := time.Duration(float64(c) * math.Max(0, 1-step))
		hi := time.Duration(float64(c) * (1 + step))
		delay = clamp(min(max(target, lo), hi).Round(delayResolution), auto)
		if delay != target {
			notes = append(notes, fmt.Sprintf("moving toward %s by at most %d%% per evaluation", target, auto.MaxStepPercent))
		}
	}
	if delay != cur && st.LastDelayChange != nil {
		since := now.Sub(st.LastDelayChange.Time)
		if since >= 0 && since < interval-dueSlack(interval) {
			notes = append(notes, fmt.Sprintf("change to %s waits: last change %s ago, evaluationInterval %s", delay, since.Round(time.Second), interval))
			delay = c
		}
	}
	return delay, notes
}

// held repeats the decision in status, within [min, max] in case the spec
// changed: nothing new can be read yet.
func held(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, floor *tailcutv1alpha1.BudgetFloor) Result {
	st := &policy.Status
	res := Result{Source: st.DelaySource, Reason: st.DelayReason, Derived: true, DerivedReason: tailcutv1alpha1.ReasonDerived, Floor: floor}
	if st.EffectiveDelay != nil {
		res.Delay = clamp(st.EffectiveDelay.Duration, auto)
	}
	if res.Source == "" {
		res.Source = tailcutv1alpha1.DelaySourceNone
	}
	if c := meta.FindStatusCondition(st.Conditions, tailcutv1alpha1.ConditionDelayDerived); c != nil && c.Reason != "" {
		res.Derived, res.DerivedReason = c.Status == metav1.ConditionTrue, c.Reason
	} else {
		res.Derived, res.DerivedReason = false, tailcutv1alpha1.ReasonNotEvaluated
	}
	if res.Reason == "" {
		res.Reason = "waiting for the first reading"
	}
	return res
}

// withoutData keeps the last good delay while it is younger than staleAfter, else
// applies the fallback. Either way DelayDerived is false with the case named.
// The message names times rather than ages, so that it does not change at every
// evaluation while the outage lasts.
func withoutData(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, nd *noData, now time.Time) Result {
	st := &policy.Status
	why := nd.msg
	if st.EffectiveDelay != nil && st.Quantile != nil &&
		(st.DelaySource == tailcutv1alpha1.DelaySourcePrometheus || st.DelaySource == tailcutv1alpha1.DelaySourceLastKnown) {
		read := st.Quantile.SampledAt.Time
		staleAt := read.Add(auto.StaleAfter.Duration)
		if now.Before(staleAt) {
			d := clamp(st.EffectiveDelay.Duration, auto)
			return Result{
				Delay: d, Source: tailcutv1alpha1.DelaySourceLastKnown, Derived: false, DerivedReason: nd.reason,
				Reason: fmt.Sprintf("keeping the last good delay %s (read at %s, stale at %s): %s: %s",
					d, read.UTC().Format(time.RFC3339), staleAt.UTC().Format(time.RFC3339), nd.reason, nd.msg),
			}
		}
		why = fmt.Sprintf("%s; the last good delay %s was read at %s, stale after %s",
			nd.msg, st.EffectiveDelay.Duration, read.UTC().Format(time.RFC3339), auto.StaleAfter.Duration)
	}
	return Fallback(&policy.Spec, nd.reason, nd.reason+": "+why)
}

// activeFloor is the budget floor in status while it is younger than a window.
func activeFloor(st *tailcutv1alpha1.HedgePolicyStatus, auto *tailcutv1alpha1.AutoDelay, now time.Time) *tailcutv1alpha1.BudgetFloor {
	if f := st.BudgetFloor; f != nil && now.Sub(f.MeasuredAt.Time) < auto.Window.Duration {
		return f.DeepCopy()
	}
	return nil
}

// pausedUntil says whether the previous decision paused hedging, and until when
// the pause holds. A spec change (new generation) lifts it.
func pausedUntil(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay) (string, time.Time, bool) {
	st := &policy.Status
	if st.EffectiveDelay != nil || st.DelaySource != tailcutv1alpha1.DelaySourceNone || st.LastDelayChange == nil {
		return "", time.Time{}, false
	}
	c := meta.FindStatusCondition(st.Conditions, tailcutv1alpha1.ConditionDelayDerived)
	if c == nil || c.ObservedGeneration != policy.Generation ||
		(c.Reason != tailcutv1alpha1.ReasonHedgingHurts && c.Reason != tailcutv1alpha1.ReasonBudgetExceeded) {
		return "", time.Time{}, false
	}
	hold := max(auto.Window.Duration, 2*policy.Spec.EffectiveEvaluationInterval())
	return c.Reason, st.LastDelayChange.Add(hold), true
}

// clamp bounds a delay to [min, max].
func clamp(d time.Duration, auto *tailcutv1alpha1.AutoDelay) time.Duration {
	return min(max(d, auto.Min.Duration), auto.Max.Duration)
}

// roundUp converts seconds to a Duration, rounded up to delayResolution.
func roundUp(seconds float64) time.Duration {
	d := secondsToDuration(seconds)
	if r := d % delayResolution; r != 0 && d < time.Duration(math.MaxInt64)-delayResolution {
		d += delayResolution - r
	}
	return d
}

// quantileName writes 0.95 as p95 and 0.999 as p99.9.
func quantileName(q float64) string {
	return "p" + strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", q*100), "0"), ".")
}
