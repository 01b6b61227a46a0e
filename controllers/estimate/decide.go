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

// Guards against hedging that does harm.
//
// Budget: the measured hedge rate (upstream_rq_retry per original request on
// the hedged cluster, exact, not censored) is compared with the budget. Above
// (1+stepTolerance) times the budget the delay is raised by maxStepPercent per
// evaluation, up to max, and hedging pauses when it is already at max. The
// reading only counts once the delay has been in force for a whole window, so
// one breach is not corrected several times over.
//
// Hedging hurts: when slowness is shared (saturation), hedges add load exactly
// when there is none to spare, and the unhedged latency rises with the hedge
// rate. While hedges are a real share of the traffic (at least hurtsMinShare
// of the budget) and the median of the uncensored histogram rose by hurtsRise
// against the window before, hedging pauses. A pause holds for
// max(window, 2*evaluationInterval), or until the spec changes, then the delay
// is derived afresh.
const (
	hurtsMinShare = 0.5
	hurtsRise     = 1.5
	// hurtsMinRise ignores rises of the median too small to matter.
	hurtsMinRise = 0.002
	// delayResolution rounds derived delays so status stays readable.
	delayResolution = 100 * time.Microsecond
)

// decide turns one evaluation's readings and the previous decision (the
// policy's status) into a Result. It is pure: time is now, memory is status.
func decide(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, r readings, now time.Time) Result {
	spec, st := &policy.Spec, &policy.Status
	budget := spec.EffectiveBudget().MaxExtraLoadPercent
	nowT := metav1.NewTime(now)
	window := promDuration(auto.Window.Duration)

	var hedgeRate *tailcutv1alpha1.HedgeRateObservation
	hedgeNote := "hedge rate unknown (" + r.hedgeNote + ")"
	if r.hedge != nil {
		pct := r.hedge.percent()
		hedgeRate = &tailcutv1alpha1.HedgeRateObservation{Percent: math.Round(pct*100) / 100, BudgetPercent: budget, SampledAt: nowT}
		hedgeNote = fmt.Sprintf("hedge rate %.2f%% of %d%% budget", pct, budget)
	}
	var quantile *tailcutv1alpha1.QuantileObservation
	if r.fail == nil {
		quantile = &tailcutv1alpha1.QuantileObservation{
			Quantile: auto.Quantile, Value: metav1.Duration{Duration: secondsToDuration(r.quantile)},
			Samples: int64(math.Round(r.samples)), SampledAt: nowT,
		}
	}
	attach := func(res Result) Result {
		res.Quantile, res.HedgeRate = quantile, hedgeRate
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

	// The delay the data asks for.
	tau := 1 - math.Max(auto.Quantile, 1-float64(budget)/100)
	qName := quantileName(1 - tau)
	var ch choice
	var basis string
	if r.cdf != nil {
		ch = r.cdf.choose(tau)
		basis = fmt.Sprintf("%s of unhedged latency over %s is %s (%.0f samples)", qName, window, round(ch.atTau), r.samples)
		if ch.onStep {
			basis += fmt.Sprintf(", on a step: %.1f%% of requests are slower than %s", 100*ch.tail, round(ch.delay))
		}
	} else {
		ch = choice{delay: r.quantile, atTau: r.quantile}
		basis = fmt.Sprintf("custom query %s over %s is %s", quantileName(auto.Quantile), window, round(r.quantile))
	}
	if nd := checkQuantile(ch.delay, auto.Max.Duration); nd != nil {
		// Not a good reading: leave status.quantile (the last good one) alone.
		res := withoutData(policy, auto, nd, now)
		res.HedgeRate = hedgeRate
		return res
	}
	target := clamp(round(ch.delay), auto)
	code := tailcutv1alpha1.ReasonDerived
	notes := []string{hedgeNote}

	cur := time.Duration(0)
	if st.EffectiveDelay != nil {
		cur = st.EffectiveDelay.Duration
	}
	forced := false
	if cur > 0 && r.hedge != nil {
		pct := r.hedge.percent()
		if r.prev != nil && r.cdf != nil && pct >= hurtsMinShare*float64(budget) && r.prev.total() >= float64(auto.MinSamples) {
			p50, prev50 := r.cdf.quantile(0.5), r.prev.quantile(0.5)
			if p50 >= hurtsRise*prev50 && p50-prev50 >= hurtsMinRise {
				return paused(tailcutv1alpha1.ReasonHedgingHurts, fmt.Sprintf(
					"unhedged p50 rose from %s to %s over %s while hedging; %s", round(prev50), round(p50), window, hedgeNote))
			}
		}
		if pct > (1+stepTolerance)*float64(budget) {
			// Over budget the delay never goes down, whatever the histogram says.
			target = max(target, clamp(cur, auto))
			inForce := st.LastDelayChange == nil || now.Sub(st.LastDelayChange.Time) >= auto.Window.Duration
			switch {
			case !inForce:
				notes = append(notes, fmt.Sprintf("above budget, but the %s window began before the last change: waiting, not lowering", window))
			case cur >= auto.Max.Duration:
				return paused(tailcutv1alpha1.ReasonBudgetExceeded, fmt.Sprintf("%s with the delay already at max %s", hedgeNote, auto.Max.Duration))
			default:
				code = tailcutv1alpha1.ReasonBudgetExceeded
				raised := clamp(round(cur.Seconds()*(1+float64(auto.MaxStepPercent)/100)), auto)
				if raised > target {
					target, forced = raised, true
				}
				notes = append(notes, fmt.Sprintf("above budget: raising from %s by %d%%", cur, auto.MaxStepPercent))
			}
		}
	}

	delay := target
	if cur > 0 {
		delay, notes = stabilize(st, auto, spec.EffectiveEvaluationInterval(), cur, target, forced, now, notes)
	}
	res := Result{
		Delay: delay, Target: target, Source: tailcutv1alpha1.DelaySourcePrometheus,
		Derived: true, DerivedReason: code,
		Reason: fmt.Sprintf("delay %s: %s; %s", delay, basis, strings.Join(notes, "; ")),
	}
	return attach(res)
}

// stabilize applies the deadband, the step limit and one change per
// evaluation interval to a move from cur to target. The result is within
// [min, max] even when cur is not (the spec changed).
func stabilize(st *tailcutv1alpha1.HedgePolicyStatus, auto *tailcutv1alpha1.AutoDelay, interval, cur, target time.Duration,
	forced bool, now time.Time, notes []string) (time.Duration, []string) {
	c := clamp(cur, auto)
	var delay time.Duration
	deadband := float64(auto.DeadbandPercent) / 100
	step := float64(auto.MaxStepPercent) / 100
	switch {
	case !forced && math.Abs(float64(target-c)) < deadband*float64(c):
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
		if since >= 0 && since < interval {
			notes = append(notes, fmt.Sprintf("change to %s waits: last change %s ago, evaluationInterval %s", delay, since.Round(time.Second), interval))
			delay = c
		}
	}
	return delay, notes
}

// withoutData keeps the last good delay while it is younger than staleAfter, else
// applies the fallback. Either way DelayDerived is false with the case named.
func withoutData(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, nd *noData, now time.Time) Result {
	st := &policy.Status
	why := nd.msg
	if st.EffectiveDelay != nil && st.Quantile != nil &&
		(st.DelaySource == tailcutv1alpha1.DelaySourcePrometheus || st.DelaySource == tailcutv1alpha1.DelaySourceLastKnown) {
		age := now.Sub(st.Quantile.SampledAt.Time)
		if age < auto.StaleAfter.Duration {
			d := clamp(st.EffectiveDelay.Duration, auto)
			return Result{
				Delay: d, Source: tailcutv1alpha1.DelaySourceLastKnown, Derived: false, DerivedReason: nd.reason,
				Reason: fmt.Sprintf("keeping the last good delay %s (read %s ago, stale after %s): %s: %s",
					d, max(age, 0).Round(time.Second), auto.StaleAfter.Duration, nd.reason, nd.msg),
			}
		}
		why = fmt.Sprintf("%s; the last good delay %s is %s old, older than staleAfter %s",
			nd.msg, st.EffectiveDelay.Duration, age.Round(time.Second), auto.StaleAfter.Duration)
	}
	return Fallback(&policy.Spec, nd.reason, nd.reason+": "+why)
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

// round converts seconds to a Duration at delayResolution.
func round(seconds float64) time.Duration {
	return secondsToDuration(seconds).Round(delayResolution)
}

// quantileName writes 0.95 as p95 and 0.999 as p99.9.
func quantileName(q float64) string {
	return "p" + strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", q*100), "0"), ".")
}
