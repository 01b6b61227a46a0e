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

// AffinityGoalHitPoints is how far (in points) hedging to the key's next owner
// may take the hit ratio below no hedging (#27).
const AffinityGoalHitPoints = 2.0

// AffinityVerdicts judges the cache runs against #27's goal: hedging to the
// next owner keeps the hit ratio within AffinityGoalHitPoints of no hedging,
// and cuts the p99 at least as much as hedging to any replica, each hedged
// run within its budget. A run with errors or late sends is not judged.
// missed says whether a judged goal was missed.
func AffinityVerdicts(runs []CacheRun) (lines []string, missed bool) {
	by := map[string]*CacheRun{}
	for i := range runs {
		by[runs[i].Config] = &runs[i]
	}
	none, anyReplica, next := by[CacheNoHedging], by[CacheAnyReplica], by[CacheNextOwner]
	if none == nil || anyReplica == nil || next == nil {
		return []string{"not judged: a configuration did not run"}, false
	}
	for _, r := range []*CacheRun{none, anyReplica, next} {
		if r.Report.Errors() > 0 || r.Report.Hedged().Lag.Late > 0 || r.Report.Unhedged().Lag.Late > 0 {
			return []string{fmt.Sprintf("not judged: %s had errors or late sends", r.Config)}, false
		}
	}
	// A run over its budget broke a promise whatever its tail.
	for _, r := range []*CacheRun{anyReplica, next} {
		if b := r.Report.BudgetPct; b == nil || r.Report.ExtraLoadPct() > *b {
			lines = append(lines, fmt.Sprintf("%s: extra load %.2f%%, over the budget (or no budget known): misses the goal", r.Config, r.Report.ExtraLoadPct()))
			missed = true
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "meets the goal"
		}
		missed = true
		return "misses the goal"
	}
	drop := 100 * (none.HitRatio() - next.HitRatio())
	lines = append(lines, fmt.Sprintf("hit ratio: %.1f%% hedging to the next owner, %.1f%% without hedging (%.1f points lower; at most %.0f allowed): %s",
		100*next.HitRatio(), 100*none.HitRatio(), drop, AffinityGoalHitPoints, verdict(drop <= AffinityGoalHitPoints)))
	lines = append(lines, fmt.Sprintf("p99: %.1f ms hedging to the next owner, %.1f ms hedging to any replica (%.1f ms without hedging): %s",
		next.Report.Hedged().P99, anyReplica.Report.Hedged().P99, none.Report.Hedged().P99, verdict(next.Report.Hedged().P99 <= anyReplica.Report.Hedged().P99)))
	if free := by[CacheNoAffinity]; free != nil {
		lines = append(lines, fmt.Sprintf("not judged: without affinity (every replica caches the hot keys) the p99 was %.1f ms, at a hit ratio of %.1f%% (%.1f points below no hedging with affinity)",
			free.Report.Hedged().P99, 100*free.HitRatio(), 100*(none.HitRatio()-free.HitRatio())))
	}
	return lines, missed
}

// AffinitySection is the Markdown section `make bench-affinity` writes.
func AffinitySection(runs []CacheRun, moves []KeyMove, o CacheABOptions, keyMoves KeyMovesOptions, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Affinity: hedging for caches (`make bench-affinity`)\n\n")
	fmt.Fprintf(&b, "Written by `make bench-affinity` on %s (took %s; %s/%s, %d CPUs).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "**The cache.** The local stack's three replicas run the workload's cache model (%s): each keeps the %d keys it served last; "+
		"a hit takes 15 ms, a miss 60 ms, and 3%% of requests take 100 ms more (a pause). tailcut verify (%s) sends %d GETs/s per arm, "+
		"each with a key out of %d drawn with Zipf exponent %.2f, to the hedged route and the bypass route of one Envoy; "+
		"%s unmeasured to fill the caches, then %s measured. Each configuration runs on a stack of its own, its caches empty at the start. "+
		"The hedge delay is static, the same in every hedged run: the hedged arm's p95 without hedging plus an Auto policy's 10%% margin; budget 5%%. "+
		"The hit ratio counts every lookup at the replicas over the measured run: both arms, and hedges. "+
		"Hedging to any replica keeps each key's requests on its owner and sends the hedge to a replica drawn round robin: tailcut's configuration "+
		"for the same policy, run by an Envoy of its own whose hedged cluster is a composite cluster (Envoy 1.40: the first attempt to a ring-hash copy, "+
		"later ones to a round-robin copy); Envoy tells hosts apart by cluster there, so about a third of these hedges go back to the owner. "+
		"Without affinity every attempt goes round robin.\n\n",
		"test/workload", o.CacheSize, verify.Generator(), o.Rate, o.Keys, o.Zipf, o.Warm, o.Duration)
	fmt.Fprintf(&b, "| configuration | delay | hit ratio | hedged p50 ms | hedged p99 ms | hedged p99.9 ms | bypass p99 ms | extra load %% | errors | late |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		delay := "none"
		if r.Delay > 0 {
			delay = r.Delay.String()
		}
		h, u := r.Report.Hedged(), r.Report.Unhedged()
		fmt.Fprintf(&b, "| %s | %s | %.1f%% | %.1f | %.1f | %.1f | %.1f | %.2f | %d | %d |\n", r.Config, delay, 100*r.HitRatio(),
			h.P50, h.P99, h.P999, u.P99, r.Report.ExtraLoadPct(), r.Report.Errors(), h.Lag.Late+u.Lag.Late)
	}
	lines, _ := AffinityVerdicts(runs)
	fmt.Fprintf(&b, "\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	fmt.Fprintf(&b, "\n**Keys moved.** A real Envoy with tailcut's configuration places %d keys (one GET each) on replicas that record the keys they see, "+
		"before and after each change of the replicas: the share of keys whose owner changed, against the least any scheme must move "+
		"(the keys the new replicas take, or the removed one held), and the fewest and most keys a replica owns after the change. "+
		"RingHash with its default ring (1,024 entries), Maglev with its default table (65,537 slots).\n\n", keyMoves.Keys)
	fmt.Fprintf(&b, "| load balancer | change | keys moved | least possible | keys per replica after |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|\n")
	for _, m := range moves {
		fmt.Fprintf(&b, "| %s | %s | %.1f%% | %.1f%% | %d to %d |\n", m.LoadBalancer, m.Change, 100*m.Moved, 100*m.Ideal, m.MinKeys, m.MaxKeys)
	}
	fmt.Fprintf(&b, "\nThe founding document's figures for a memcached proxy (its own measurements, quoted, not run here): "+
		"ring hash 6 → 8 servers moved 11.1%% of the keys with one point per server, with 8,743 to 375,226 keys per server, and 18.6%% with 3 points; "+
		"rendezvous hashing 24.4%%; jump hashing 24.9%%, and 98%% when a server in the middle is removed; \"open jump\" with tombstones 12.5%% on a removal.\n")
	return b.String()
}
