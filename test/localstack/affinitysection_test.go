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
	"strings"
	"testing"

	"github.com/tailcut/tailcut/controllers/verify"
)

func cacheRun(config string, hits, lookups, p99 float64, errors int) CacheRun {
	var r Report
	r.UnhedgedArm = verify.ArmBypass
	r.Arms = map[string]verify.Arm{
		verify.ArmHedged: {Latency: verify.Latency{P99: p99}, Errors: errors},
		verify.ArmBypass: {Latency: verify.Latency{P99: 160}},
	}
	r.ExtraLoad.Replicas = &verify.ReplicaLoad{CacheHits: hits, CacheLookups: lookups, Pct: 3}
	budget := 5.0
	r.BudgetPct = &budget
	return CacheRun{Config: config, Report: r}
}

func overBudget(r CacheRun) CacheRun {
	r.Report.ExtraLoad.Replicas.Pct = 6
	return r
}

// TestAffinityVerdictsJudgeEveryGoal: each half of #27's goal fails on its
// own, a hedged run over its budget fails whatever its tail, and a run with
// errors is not judged.
func TestAffinityVerdictsJudgeEveryGoal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		runs   []CacheRun
		missed bool
		want   string
	}{
		{"both met", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheAnyReplica, 700, 1000, 120, 0), cacheRun(CacheNextOwner, 805, 1000, 100, 0)},
			false, "1.5 points lower"},
		{"hit ratio 2.5 points lower", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheAnyReplica, 700, 1000, 120, 0), cacheRun(CacheNextOwner, 795, 1000, 100, 0)},
			true, "2.5 points lower; at most 2 allowed): misses the goal"},
		{"p99 above any replica's", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheAnyReplica, 700, 1000, 120, 0), cacheRun(CacheNextOwner, 815, 1000, 121, 0)},
			true, "121.0 ms hedging to the next owner, 120.0 ms hedging to any replica (150.0 ms without hedging): misses the goal"},
		{"next owner over the budget", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheAnyReplica, 700, 1000, 120, 0), overBudget(cacheRun(CacheNextOwner, 815, 1000, 100, 0))},
			true, CacheNextOwner + ": extra load 6.00%, over the budget"},
		{"without affinity: said, not judged", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheNoAffinity, 700, 1000, 90, 0), cacheRun(CacheAnyReplica, 810, 1000, 120, 0), cacheRun(CacheNextOwner, 805, 1000, 100, 0)},
			false, "not judged: without affinity (every replica caches the hot keys) the p99 was 90.0 ms, at a hit ratio of 70.0% (12.0 points below no hedging with affinity)"},
		{"errors", []CacheRun{cacheRun(CacheNoHedging, 820, 1000, 150, 0), cacheRun(CacheAnyReplica, 700, 1000, 120, 3), cacheRun(CacheNextOwner, 815, 1000, 100, 0)},
			false, "not judged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, missed := AffinityVerdicts(tc.runs)
			text := strings.Join(lines, "\n")
			if missed != tc.missed || !strings.Contains(text, tc.want) {
				t.Errorf("missed %v, verdicts:\n%s\nwant missed %v and %q", missed, text, tc.missed, tc.want)
			}
		})
	}
}
