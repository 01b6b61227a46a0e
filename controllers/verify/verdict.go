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

package verify

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Criteria are the promises a run is judged by.
type Criteria struct {
	// MaxP99Ratio: the hedged p99 must be at most this times the unhedged p99.
	MaxP99Ratio float64
	// LateAfter and MaxLateFraction make a run valid: at most MaxLateFraction
	// of any stream's requests may leave LateAfter or more behind their
	// schedule. A generator that fell behind measured a lower rate than it
	// claims, and often a shorter tail.
	LateAfter       time.Duration
	MaxLateFraction float64
}

// DefaultCriteria: hedged p99 at most half the unhedged one; a run is valid
// while fewer than 1% of requests are sent 10ms or more late.
func DefaultCriteria() Criteria {
	return Criteria{MaxP99Ratio: 0.5, LateAfter: 10 * time.Millisecond, MaxLateFraction: 0.01}
}

// judge checks every promise at once and returns why the run fails; none
// means it passes. A promise that could not be measured fails: a verdict
// never passes on what it did not see.
func judge(r *Report, c Criteria) []string {
	reasons := r.Invalid(c)
	for _, name := range slices.Sorted(maps.Keys(r.Arms)) {
		a := r.Arms[name]
		if errs := a.Errors + a.SettleErrors; errs > 0 {
			reasons = append(reasons, fmt.Sprintf("%d of %d %s requests failed (%v)", errs, a.Sent+a.SettleSent, name, a.ErrorKinds))
		}
	}
	h, u := r.Hedged(), r.Unhedged()
	switch {
	case h.Count == 0 || u.Count == 0:
		reasons = append(reasons, "no latency measured in one of the arms")
	case h.P99 > c.MaxP99Ratio*u.P99:
		reasons = append(reasons, fmt.Sprintf("hedged p99 %.1fms is not at most %g x %s p99 %.1fms (ratio %.2f)", h.P99, c.MaxP99Ratio, r.UnhedgedArm, u.P99, h.P99/u.P99))
	}
	reasons = append(reasons, judgeLoad(r)...)
	return append(reasons, r.Duplicated()...)
}

// Invalid says why the run did not apply the load it claims: an arm that
// sent nothing, sent less than 99% of its schedule, or sent more than
// c.MaxLateFraction of its requests c.LateAfter or more behind it. None: the
// rate was kept, and the latencies measured it. The benchmarks judge their
// runs' load by the same rule.
func (r *Report) Invalid(c Criteria) []string {
	reasons := []string{}
	for _, name := range slices.Sorted(maps.Keys(r.Arms)) {
		a := r.Arms[name]
		total := a.Sent + a.SettleSent
		if total == 0 {
			reasons = append(reasons, fmt.Sprintf("invalid run: the %s arm sent nothing", name))
			continue
		}
		if late := float64(a.Lag.Late) / float64(total); late > c.MaxLateFraction {
			reasons = append(reasons, fmt.Sprintf("invalid run: %d of %d %s requests (%.1f%%) left %s or more behind their schedule (lag p99 %.1fms, max %.1fms): the generator could not keep %d/s; give it more CPU or raise --max-connections/--max-workers",
				a.Lag.Late, total, name, 100*late, c.LateAfter, a.Lag.P99MS, a.Lag.MaxMS, r.RatePerArm))
		}
		if a.Sent < a.Scheduled*99/100 {
			reasons = append(reasons, fmt.Sprintf("invalid run: the %s arm sent %d of %d scheduled requests", name, a.Sent, a.Scheduled))
		}
	}
	return reasons
}

func judgeLoad(r *Report) []string {
	e, rl := r.ExtraLoad.Envoy, r.ExtraLoad.Replicas
	if e == nil && rl == nil {
		return []string{"extra load not measured: give --envoy-admin, --prometheus-url or --workload-metrics"}
	}
	if r.BudgetPct == nil {
		return []string{"the budget is unknown: give --policy or --budget-percent"}
	}
	var reasons []string
	// A source that saw none of the run's requests measured nothing: a wrong
	// cluster name, or proxies that Prometheus does not scrape.
	sent := r.Hedged().Sent + r.Hedged().SettleSent
	if e != nil && e.Requests < float64(sent)/2 {
		reasons = append(reasons, fmt.Sprintf("Envoy's counters (%s) saw %.0f requests on the hedged cluster, for %d the run sent: the wrong cluster, or not every proxy is read", e.Source, e.Requests, sent))
	}
	if rl != nil && rl.Requests < float64(sent)/2 {
		reasons = append(reasons, fmt.Sprintf("the replicas' counters (%s) saw %.0f requests, for %d the run sent: not every replica is read", rl.Source, rl.Requests, sent))
	}
	if e != nil && e.Pct > *r.BudgetPct {
		reasons = append(reasons, fmt.Sprintf("extra load %.2f%% (Envoy's counters) is above the %g%% budget", e.Pct, *r.BudgetPct))
	}
	if w := e.worst(); w != nil && w.Hedges > w.AllowedHedges(*r.BudgetPct) {
		reasons = append(reasons, fmt.Sprintf("extra load %.2f%% over the %.1fs from %.1fs into the run (Envoy's counters: %.0f hedges for %.0f requests, at most %.1f within the %g%% budget, a second's requests at each end counted in) is above the budget over a stretch of %s",
			w.Pct, w.Seconds, w.StartS, w.Hedges, w.Requests, w.AllowedHedges(*r.BudgetPct), *r.BudgetPct, w.Window))
	}
	if rl != nil && rl.Pct > *r.BudgetPct {
		reasons = append(reasons, fmt.Sprintf("extra load %.2f%% (counted at the replicas) is above the %g%% budget", rl.Pct, *r.BudgetPct))
	}
	return reasons
}

// Duplicated says why a request that must run once may have run twice: the replicas' counters
// say so directly; Envoy's say that nothing on the unhedged route was retried.
func (r *Report) Duplicated() []string {
	var reasons []string
	if e := r.ExtraLoad.Envoy; e != nil && e.UnhedgedRetries > 0 {
		reasons = append(reasons, fmt.Sprintf("%.0f requests on the unhedged route (POSTs among them) were retried", e.UnhedgedRetries))
	}
	p := r.Posts
	if p == nil {
		return reasons
	}
	switch {
	case p.Executed != nil && *p.Executed > float64(p.Sent):
		reasons = append(reasons, fmt.Sprintf("%.0f POSTs were duplicated (%d sent, %.0f executed)", *p.Executed-float64(p.Sent), p.Sent, *p.Executed))
	case p.Executed == nil && r.ExtraLoad.Envoy == nil:
		reasons = append(reasons, "POST duplicates not measured: give --workload-metrics, --envoy-admin or --prometheus-url")
	}
	return reasons
}
