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
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/tailcut/tailcut/controllers/verify"
)

// FanOutVerdicts judges the fan-out runs: every run keeps every promise
// tailcut verify checks (hedged p99 at most half the bypass p99, no error,
// a valid rate, extra load within the run's own budget, no POST
// duplicated), and the two-copy fan-out, which costs 40 times the auto
// hedge's budget, must cut the p99 below the auto hedge's. missed says
// whether a run or the comparison failed.
func FanOutVerdicts(runs []FanOutRun) (lines []string, missed bool) {
	by := map[string]*FanOutRun{}
	for i := range runs {
		r := &runs[i]
		by[r.Config] = r
		if r.Report.Pass {
			lines = append(lines, fmt.Sprintf("%s: passes tailcut verify (extra load %.2f%% within %d%%, %s)", r.Config, r.Report.ExtraLoadPct(), r.BudgetPct, postsLine(r.Report)))
			continue
		}
		missed = true
		lines = append(lines, fmt.Sprintf("%s: FAILS tailcut verify: %s", r.Config, strings.Join(r.Report.Reasons, "; ")))
	}
	auto, two := by[FanOutAutoHedge], by[FanOutTwoCopies]
	if auto == nil || two == nil {
		return append(lines, "not compared: a configuration did not run"), true
	}
	a, f := auto.Report.Hedged(), two.Report.Hedged()
	verdict := "cuts it further"
	if f.P99 >= a.P99 {
		verdict, missed = "MISSES: a fan-out that does not beat one hedge is not worth its load", true
	}
	lines = append(lines, fmt.Sprintf("p99: %.1f ms with two copies at once, %.1f ms with one hedge at the auto delay (%.2fx), for %.0fx the extra load: %s",
		f.P99, a.P99, f.P99/a.P99, two.Report.ExtraLoadPct()/auto.Report.ExtraLoadPct(), verdict))
	return lines, missed
}

func postsLine(r Report) string {
	p := r.Posts
	if p == nil || p.Executed == nil {
		return "POSTs not counted"
	}
	return fmt.Sprintf("%d POSTs sent, %.0f executed", p.Sent, *p.Executed)
}

// FanOutSection is the Markdown section `make bench-fanout` writes.
func FanOutSection(runs []FanOutRun, o FanOutOptions, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fan-out: every copy at once (`make bench-fanout`)\n\n")
	fmt.Fprintf(&b, "Written by `make bench-fanout` on %s (took %s; %s/%s, %d CPUs).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "One local stack runs the %s scenario (%s). tailcut verify (%s) sends %d GETs/s per arm to the hedged route and the bypass route of one Envoy, "+
		"and %d POSTs/s beside them, for %s per configuration. First the default Auto policy (p95, one hedge, 5%% budget), measured once its delay has settled; "+
		"then the same policy with `delay.mode: FanOut`: one copy of each GET (`maxHedges: 1`, budget 100%%), then two (`maxHedges: 2`, budget 200%%). "+
		"Extra load: the larger of Envoy's counters and the replicas' count of extra attempts, per hedged request; POSTs executed: counted at the replicas.\n\n",
		o.Scenario.Name, o.Scenario.Description, verify.Generator(), o.Rate, o.PostRate, o.Duration)
	fmt.Fprintf(&b, "| configuration | delay | budget %% | hedged p50 ms | hedged p99 ms | hedged p99.9 ms | bypass p99 ms | p99 ratio | extra load %% | POSTs sent / executed | errors | late |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		h, u := r.Report.Hedged(), r.Report.Unhedged()
		posts := "-"
		if p := r.Report.Posts; p != nil && p.Executed != nil {
			posts = fmt.Sprintf("%d / %.0f", p.Sent, *p.Executed)
		}
		fmt.Fprintf(&b, "| %s | %.1fms | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s | %d | %d |\n", r.Config, r.Report.DelayMS, r.BudgetPct,
			h.P50, h.P99, h.P999, u.P99, r.Report.Ratio["p99"], r.Report.ExtraLoadPct(), posts, r.Report.Errors(), h.Lag.Late+u.Lag.Late)
	}
	lines, _ := FanOutVerdicts(runs)
	fmt.Fprintf(&b, "\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	return b.String()
}
