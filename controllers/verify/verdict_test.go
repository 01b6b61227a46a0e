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
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// passing is a run that keeps every promise: the demo's figures.
func passing() *Report {
	arm := func(p99 float64) Arm {
		return Arm{Latency: Latency{Count: 9000, P99: p99}, Scheduled: 9000, Sent: 9000, SettleSent: 18000, AchievedRate: 150, Lag: Lag{P99MS: 0.4, MaxMS: 3}}
	}
	return &Report{
		UnhedgedArm: ArmBypass, RatePerArm: 150,
		Arms: map[string]Arm{ArmHedged: arm(37.4), ArmBypass: arm(116.7), ArmPost: {Latency: Latency{Count: 600, P99: 20}, Scheduled: 600, Sent: 600}},
		ExtraLoad: ExtraLoad{Envoy: &EnvoyLoad{Pct: 4.3, Requests: 27000, Hedges: 1161,
			Worst: &StretchLoad{Window: "30s", StartS: 60, Seconds: 30.2, Requests: 4530, Hedges: 226, Pct: 4.99}}, Replicas: &ReplicaLoad{Pct: 4.2, Requests: 54600, SideEffects: 600}},
		BudgetPct: ptr(5.0),
		Posts:     &Posts{Sent: 600, Executed: ptr(600.0)},
	}
}

func TestJudgeChecksEveryPromise(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *Report)
		want   string // a reason that must be given; "" for a pass
	}{
		{"every promise kept", func(*Report) {}, ""},
		{"tail not cut", func(r *Report) { setP99(r, ArmHedged, 60) }, "hedged p99 60.0ms is not at most 0.5 x bypass p99 116.7ms"},
		{"no unhedged samples", func(r *Report) { a := r.Arms[ArmBypass]; a.Count = 0; r.Arms[ArmBypass] = a }, "no latency measured"},
		{"over the budget by Envoy's counters", func(r *Report) { r.ExtraLoad.Envoy.Pct = 5.01 }, "extra load 5.01% (Envoy's counters) is above the 5% budget"},
		// 4,530 requests over 30.2 s: at most 0.05 x (4,530 + 2 x 150) = 241.5 hedges.
		{"over the budget over one stretch", func(r *Report) { r.ExtraLoad.Envoy.Worst.Hedges, r.ExtraLoad.Envoy.Worst.Pct = 242, 5.34 },
			"extra load 5.34% over the 30.2s from 60.0s into the run (Envoy's counters: 242 hedges for 4530 requests, at most 241.5 within the 5% budget"},
		{"a second's requests at each end of a stretch", func(r *Report) { r.ExtraLoad.Envoy.Worst.Hedges, r.ExtraLoad.Envoy.Worst.Pct = 241, 5.32 }, ""},
		{"over the budget at the replicas", func(r *Report) { r.ExtraLoad.Replicas.Pct = 6 }, "extra load 6.00% (counted at the replicas)"},
		{"budget unknown", func(r *Report) { r.BudgetPct = nil }, "the budget is unknown"},
		{"Envoy's counters of another cluster", func(r *Report) { r.ExtraLoad.Envoy = &EnvoyLoad{Source: "http://a"} }, "Envoy's counters (http://a) saw 0 requests on the hedged cluster, for 27000 the run sent"},
		{"replicas not all read", func(r *Report) { r.ExtraLoad.Replicas.Requests = 100 }, "the replicas' counters () saw 100 requests, for 27000"},
		{"extra load not measured", func(r *Report) { r.ExtraLoad = ExtraLoad{}; r.Posts.Executed = nil }, "extra load not measured"},
		{"errors while measuring", func(r *Report) { a := r.Arms[ArmHedged]; a.Errors = 1; r.Arms[ArmHedged] = a }, "1 of 27000 hedged requests failed"},
		{"errors while settling", func(r *Report) { a := r.Arms[ArmBypass]; a.SettleErrors = 3; r.Arms[ArmBypass] = a }, "3 of 27000 bypass requests failed"},
		{"sends late", func(r *Report) { a := r.Arms[ArmHedged]; a.Lag.Late = 271; r.Arms[ArmHedged] = a }, "invalid run: 271 of 27000 hedged requests (1.0%) left 10ms or more behind"},
		{"1% late is still valid", func(r *Report) { a := r.Arms[ArmHedged]; a.Lag.Late = 270; r.Arms[ArmHedged] = a }, ""},
		{"rate not reached", func(r *Report) { a := r.Arms[ArmBypass]; a.Sent = 8000; r.Arms[ArmBypass] = a }, "invalid run: the bypass arm sent 8000 of 9000"},
		{"duplicated POSTs", func(r *Report) { r.Posts.Executed = ptr(601.0) }, "1 POSTs were duplicated (600 sent, 601 executed)"},
		{"a retry on the unhedged route", func(r *Report) { r.ExtraLoad.Envoy.UnhedgedRetries = 2 }, "2 requests on the unhedged route"},
		{"POSTs not counted anywhere", func(r *Report) { r.ExtraLoad.Envoy = nil; r.Posts.Executed = nil }, "POST duplicates not measured"},
		{"POSTs shown safe by Envoy alone", func(r *Report) { r.ExtraLoad.Replicas = nil; r.Posts.Executed = nil }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := passing()
			tc.mutate(r)
			reasons := judge(r, DefaultCriteria())
			if tc.want == "" {
				if len(reasons) != 0 {
					t.Fatalf("want a pass, got %q", reasons)
				}
				return
			}
			if !strings.Contains(strings.Join(reasons, "\n"), tc.want) {
				t.Fatalf("want a reason containing %q, got %q", tc.want, reasons)
			}
		})
	}
}

func setP99(r *Report, arm string, v float64) {
	a := r.Arms[arm]
	a.P99 = v
	r.Arms[arm] = a
}

// Counters are compared per series: two proxies at {2000 -> 1010 -> 1020}
// (one restarted, counting 10 since, the other 10 more) increased by 20, not
// by 1030 or by the fall of their sum.
func TestIncreaseIsPerSeries(t *testing.T) {
	key := func(proxy string) string {
		return seriesKey(envoyTotal, map[string]string{"envoy_cluster_name": "c"}, proxy)
	}
	before := counts{key("a"): 1000, key("b"): 1000}
	mid := counts{key("a"): 10, key("b"): 1000}
	after := counts{key("a"): 15, key("b"): 1005}
	if got := increase(before, mid).sum(envoyTotal); got != 10 {
		t.Errorf("restart of a: increase %g, want 10", got)
	}
	if got := increase(mid, after).sum(envoyTotal); got != 10 {
		t.Errorf("after the restart: increase %g, want 10", got)
	}
	if got := increase(before, after).sum(envoyTotal, label("envoy_cluster_name", "c")); got != 20 {
		t.Errorf("across the restart: increase %g, want 20", got)
	}
	// A new proxy counts all it did; a lost one counts nothing.
	if got := increase(counts{key("a"): 5}, counts{key("b"): 7}).sum(envoyTotal); got != 7 {
		t.Errorf("new and lost series: increase %g, want 7", got)
	}
	// A label value that is a prefix of another is not matched by it.
	other := seriesKey(envoyTotal, map[string]string{"envoy_cluster_name": "c_bypass"}, "a")
	if got := (counts{other: 3}).sum(envoyTotal, label("envoy_cluster_name", "c")); got != 0 {
		t.Errorf("c matched c_bypass: %g", got)
	}
}

// Nearest rank, checked by hand on 1..1000 ms.
func TestRankIsNearestRank(t *testing.T) {
	var ms []float64
	for i := 1; i <= 1000; i++ {
		ms = append(ms, float64(i))
	}
	for p, want := range map[float64]float64{50: 500, 90: 900, 99: 990, 99.9: 999, 100: 1000, 0.01: 1} {
		if got := rank(ms, p); got != want {
			t.Errorf("p%g = %g, want %g", p, got, want)
		}
	}
	if got := rank(nil, 99); got != 0 {
		t.Errorf("empty: %g", got)
	}
}
