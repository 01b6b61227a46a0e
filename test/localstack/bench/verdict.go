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

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/localstack"
)

// scenarioVerdict is one scenario's automatic run judged against the targets.
//
// Auto is compared with the best static delay by hedged p99 over one
// reference for the whole scenario: the median of its valid runs' bypass p99.
// The bypass arm is the same in every run, and one run's bypass p99 moves by
// sampling alone (stall, 18 pauses in 30 s: 109.9-125.5 ms across the runs of
// one idle bench), so a per-run hedged/bypass ratio carried that noise into
// the comparison of two hedged tails. The per-run ratio stays the measure of
// the promises made within a run (bimodal, saturation, badhost), as in
// tailcut verify's verdict.
type scenarioVerdict struct {
	scenario string
	// reference is the median bypass p99 of the scenario's valid runs.
	reference float64
	auto      row
	// best is the static run of the sweep with the lowest hedged p99 among
	// those that kept the budget and the rate with no error; nil: none did.
	best *row
	// again is best's delay measured again, as long as auto's run; nil when
	// it was not, or that run did not keep the budget and the rate.
	again *row
	// vsBest is auto's hedged p99 over again's, or best's when again is nil
	// (0: no best).
	vsBest float64
	fails  []string
}

// valid says whether a run applied the load it claims, by tailcut verify's
// own rule (verify.Report.Invalid), none of its requests failed and none
// that must run once ran twice (verify.Report.Duplicated).
func valid(r localstack.Report) bool {
	return len(r.Invalid(verify.DefaultCriteria())) == 0 && r.Errors() == 0 && len(r.Duplicated()) == 0
}

// judgeRuns judges every scenario's automatic run, in the order the rows
// came, and lists the static runs that went over the budget over a stretch
// of the account's window.
func judgeRuns(rows []row) (verdicts []scenarioVerdict, overStretch []string) {
	var order []string
	byScenario := map[string][]row{}
	for _, r := range rows {
		if _, seen := byScenario[r.scenario]; !seen {
			order = append(order, r.scenario)
		}
		byScenario[r.scenario] = append(byScenario[r.scenario], r)
		if !r.auto && !stretchWithin(r.r) {
			overStretch = append(overStretch, r.scenario+" at "+r.delay)
		}
	}
	for _, sc := range order {
		runs := byScenario[sc]
		i := slices.IndexFunc(runs, func(r row) bool { return r.auto })
		if i < 0 {
			continue
		}
		verdicts = append(verdicts, judgeScenario(sc, runs[i], runs))
	}
	return verdicts, overStretch
}

// bestStatic is the static run of the sweep with the lowest hedged p99
// among those that kept the budget and the rate with no error; nil: none did.
func bestStatic(runs []row) *row {
	var best *row
	for i, r := range runs {
		if r.auto || r.again != "" || !within(r.r) || !valid(r.r) {
			continue
		}
		if best == nil || r.r.Hedged().P99 < best.r.Hedged().P99 {
			best = &runs[i]
		}
	}
	return best
}

func judgeScenario(sc string, a row, runs []row) scenarioVerdict {
	v := scenarioVerdict{scenario: sc, auto: a, best: bestStatic(runs)}
	var bypass []float64
	for i, r := range runs {
		if valid(r.r) {
			bypass = append(bypass, r.r.Unhedged().P99)
		}
		if v.best != nil && r.again == v.best.delay && within(r.r) && valid(r.r) {
			v.again = &runs[i]
		}
	}
	v.reference = median(bypass)

	switch {
	case !within(a.r) && stretchWithin(a.r):
		v.fails = append(v.fails, fmt.Sprintf("extra load %.2f%% above the budget", a.r.ExtraLoadPct()))
	case !stretchWithin(a.r):
		v.fails = append(v.fails, fmt.Sprintf("extra load %s%% over the worst stretch of %s, above the budget or not read", worstCell(a.r), plan.HedgeWindow))
	}
	if n := a.r.Errors(); n > 0 {
		v.fails = append(v.fails, fmt.Sprintf("%d requests failed", n))
	}
	v.fails = append(v.fails, a.r.Invalid(verify.DefaultCriteria())...)
	v.fails = append(v.fails, a.r.Duplicated()...)
	if cmp := v.comparedWith(); cmp != nil && cmp.r.Hedged().P99 > 0 {
		v.vsBest = a.r.Hedged().P99 / cmp.r.Hedged().P99
		if target := autoVsBestOf(sc); v.vsBest > target {
			v.fails = append(v.fails, fmt.Sprintf("hedged p99 %.1fms is %.2fx the best static's (%s, %.1fms), above %.2f",
				a.r.Hedged().P99, v.vsBest, cmp.delay, cmp.r.Hedged().P99, target))
		}
	}
	ratio := a.r.Ratio["p99"]
	switch sc {
	case "bimodal":
		if ratio > bimodalRatio {
			v.fails = append(v.fails, fmt.Sprintf("hedged p99 %.2fx bypass, above %.2f", ratio, bimodalRatio))
		}
	case "saturation":
		if ratio > saturationRatio {
			v.fails = append(v.fails, fmt.Sprintf("hedged p99 %.2fx bypass under saturation, above %.2f", ratio, saturationRatio))
		}
	case "badhost":
		// Met by a named reason why not, if no static delay within the
		// budget did better.
		switch {
		case ratio <= badhostRatio:
		case a.reachReason == "":
			v.fails = append(v.fails, fmt.Sprintf("hedged p99 %.2fx bypass with one slow replica, above %.2f, and no reason named", ratio, badhostRatio))
		case v.best != nil && v.best.r.Ratio["p99"] <= badhostRatio:
			v.fails = append(v.fails, fmt.Sprintf("%s named, but the static %s reached %.2f within the budget", a.reachReason, v.best.delay, v.best.r.Ratio["p99"]))
		}
	}
	return v
}

// comparedWith is the run auto is compared with: the best static delay
// measured again, or the sweep's run of it when it was not (nil: no best).
func (v scenarioVerdict) comparedWith() *row {
	if v.again != nil {
		return v.again
	}
	return v.best
}

// verdictRow is the scenario's line of the targets table.
func (v scenarioVerdict) verdictRow() string {
	bestCell, bestP99, againP99, rel := "none kept the budget and the rate", "-", "-", "-"
	if v.best != nil {
		bestCell, bestP99, rel = v.best.delay, fmt.Sprintf("%.1f", v.best.r.Hedged().P99), fmt.Sprintf("%.2f", v.vsBest)
		againP99 = "not kept (the sweep's is compared)"
		if v.again != nil {
			againP99 = fmt.Sprintf("%.1f", v.again.r.Hedged().P99)
		}
	}
	verdict := "met"
	if len(v.fails) > 0 {
		verdict = "MISSED: " + strings.Join(v.fails, "; ")
	}
	return fmt.Sprintf("| %s | %.1f | %s | %s | %s | %.1f | %s | %.2f | %.2f | %s |\n", v.scenario, v.reference, bestCell, bestP99, againP99,
		v.auto.r.Hedged().P99, rel, v.auto.r.Ratio["p99"], v.auto.r.ExtraLoadPct(), verdict)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
