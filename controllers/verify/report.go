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
	"io"
	"strings"
)

// Report is what `tailcut verify` found. Its JSON keys are stable: scripts,
// the chart's Helm test and the project's own tests read them.
type Report struct {
	// URL is the hedged route's URL, Host the Host header that names the
	// Service, Policy the HedgePolicy (namespace/name) when one was named.
	URL    string `json:"url"`
	Host   string `json:"host"`
	Policy string `json:"policy,omitempty"`
	// Scenario is free text from the caller (the demo's latency model).
	Scenario string `json:"scenario,omitempty"`
	// Generator is the load generator and its version.
	Generator string `json:"generator"`
	// UnhedgedArm names the reference arm: "bypass" (the bypass route of the
	// same proxy) or "direct" (the Service's endpoints, with no proxy).
	UnhedgedArm string `json:"unhedged_arm"`
	RatePerArm  int    `json:"rate_per_arm"`
	Duration    string `json:"duration"`
	Settle      string `json:"settle"`
	// Arms holds "hedged", the unhedged arm, and "post" when POSTs were sent.
	Arms map[string]Arm `json:"arms"`
	// Ratio is hedged / unhedged for p50, p90, p95, p99 and p999.
	Ratio map[string]float64 `json:"ratio"`
	// ExtraLoad is the extra requests the hedges cost, as measured.
	ExtraLoad ExtraLoad `json:"extra_load"`
	// BudgetPct is the policy's maxExtraLoadPercent (nil: unknown).
	BudgetPct   *float64 `json:"budget_pct"`
	MaxP99Ratio float64  `json:"max_p99_ratio"`
	// Account is what the hedge account in tailcut's proxy counted of the
	// policy over the run (nil: no proxy counters were read).
	Account *AccountCounts `json:"hedge_account,omitempty"`
	// Posts is the non-idempotent stream (nil: none was sent).
	Posts   *Posts   `json:"posts,omitempty"`
	Pass    bool     `json:"pass"`
	Reasons []string `json:"reasons"`
}

// Arm is one stream: its latency over the measured phase, what it sent, its
// errors and how well the generator kept its schedule.
type Arm struct {
	Latency
	// Scheduled is how many requests the rate called for in the measured
	// phase, Sent how many were sent.
	Scheduled int `json:"scheduled"`
	Sent      int `json:"sent"`
	// AchievedRate is the measured phase's requests per second, from their
	// actual send times.
	AchievedRate float64 `json:"achieved_rate"`
	Errors       int     `json:"errors"`
	// ErrorKinds counts the first few kinds of error.
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`
	// SettleSent and SettleErrors are the settling phase's; its errors count
	// in the verdict too.
	SettleSent   int `json:"settle_sent"`
	SettleErrors int `json:"settle_errors"`
	// Lag covers both phases.
	Lag Lag `json:"send_lag"`
}

// ExtraLoad is the extra load, from each source that could measure it.
type ExtraLoad struct {
	Envoy    *EnvoyLoad   `json:"envoy,omitempty"`
	Replicas *ReplicaLoad `json:"replicas,omitempty"`
	// Missing says why a source was not read.
	Missing []string `json:"not_measured,omitempty"`
}

// EnvoyLoad is read from the proxies' own counters on the hedged cluster, over
// the whole run (settling included), from every proxy: it holds for any
// Service. Other clients' traffic through the same route counts too.
type EnvoyLoad struct {
	// Source is the admin URLs or the Prometheus that was read.
	Source string `json:"source"`
	// Requests is the hedged cluster's requests (attempts less hedges), Hedges
	// its upstream_rq_retry: every extra attempt.
	Requests float64 `json:"requests"`
	Hedges   float64 `json:"hedges"`
	Pct      float64 `json:"pct"`
	// UnhedgedRetries is upstream_rq_retry on the unhedged cluster (the bypass
	// route and every method tailcut does not hedge, POSTs among them): it
	// must stay 0.
	UnhedgedRetries float64 `json:"unhedged_retries"`
	// Worst is the stretch of the hedge account's window or longer nearest
	// to going over the budget (worstStretch): read from the proxies' admin
	// every second during the run, or from each proxy's scrapes stored in
	// Prometheus (nil: the run was shorter than a window, or than a window
	// between two scrapes of a proxy).
	Worst *StretchLoad `json:"worst_stretch,omitempty"`
}

// StretchLoad is the extra load over one stretch of a run.
type StretchLoad struct {
	// Window is the hedge account's window; Seconds the stretch's length, a
	// window or a little more, StartS its start in seconds from the start of
	// the run.
	Window  string  `json:"window"`
	StartS  float64 `json:"start_s"`
	Seconds float64 `json:"seconds"`
	// Requests and Hedges are as in EnvoyLoad, over the stretch.
	Requests float64 `json:"requests"`
	Hedges   float64 `json:"hedges"`
	Pct      float64 `json:"pct"`
	// Readings is how many readings the run's stretches were drawn from.
	Readings int `json:"readings"`
	// Proxy is the proxy whose scrapes the stretch was read from, when read
	// through Prometheus: each proxy keeps its own account and is scraped at
	// its own moments, so each is judged alone. Empty when every proxy's
	// admin was read at once and summed.
	Proxy string `json:"proxy,omitempty"`
}

// AccountCounts is how the hedge account decided the hedged route's requests
// on arrival, over the whole run (settling included), from every proxy: near
// the budget's end it hedges a request late (1.5 x the delay), past it not
// at all. A late grant whose request answers first sends nothing, so these
// are decisions, not hedges sent. They explain a tail the verdict judges: a
// p99 among late hedges, or slow requests turned away.
type AccountCounts struct {
	// Read is false when the counters were not read; Note says why.
	Read       bool    `json:"read"`
	Note       string  `json:"note,omitempty"`
	HedgedLate float64 `json:"hedged_late"`
	TurnedAway float64 `json:"turned_away"`
	// LatePct and TurnedAwayPct are per 100 of EnvoyLoad.Requests.
	LatePct       float64 `json:"hedged_late_pct"`
	TurnedAwayPct float64 `json:"turned_away_pct"`
}

// ReplicaLoad is counted at the replicas, where they export counters (the demo
// workload does): extra attempts (x-envoy-attempt-count above 1) per hedged
// request sent.
type ReplicaLoad struct {
	Source        string  `json:"source"`
	Requests      float64 `json:"requests"`
	ExtraAttempts float64 `json:"extra_attempts"`
	Pct           float64 `json:"pct"`
	SideEffects   float64 `json:"side_effects"`
	// CacheHits and CacheLookups are the replicas' cache counters, where
	// they keep a cache by key (the workload's cache model): every request
	// of both arms and every hedge is a lookup.
	CacheHits    float64 `json:"cache_hits,omitempty"`
	CacheLookups float64 `json:"cache_lookups,omitempty"`
}

// CacheHitRatio is the share of the replicas' cache lookups that hit; ok is
// false where they count none.
func (rl *ReplicaLoad) CacheHitRatio() (ratio float64, ok bool) {
	if rl == nil || rl.CacheLookups == 0 {
		return 0, false
	}
	return rl.CacheHits / rl.CacheLookups, true
}

// Posts is the non-idempotent stream: sent by the verifier, and executed as
// the replicas counted them (nil: they do not count).
type Posts struct {
	Sent     int      `json:"sent"`
	Executed *float64 `json:"executed"`
}

// Unhedged is the reference arm.
func (r *Report) Unhedged() Arm { return r.Arms[r.UnhedgedArm] }

// Hedged is the hedged arm.
func (r *Report) Hedged() Arm { return r.Arms[ArmHedged] }

// Arm names.
const (
	ArmHedged = "hedged"
	ArmBypass = "bypass"
	ArmDirect = "direct"
	ArmPost   = "post"
)

// PrintTable writes the report for a person.
func (r *Report) PrintTable(w io.Writer) {
	settle := ""
	if r.Settle != "0s" {
		settle = " after " + r.Settle + " of settling (not measured)"
	}
	fmt.Fprintf(w, "\ntailcut verify: %s (Host %s), %d requests/s per arm for %s%s\n\n", r.URL, r.Host, r.RatePerArm, r.Duration, settle)
	fmt.Fprintf(w, "%-14s %7s %7s %7s %7s %7s %7s %7s %7s %9s %8s\n", "arm", "count", "p50", "p90", "p95", "p99", "p99.9", "max", "errors", "rate/s", "lag p99")
	names := []string{r.UnhedgedArm, ArmHedged}
	if _, ok := r.Arms[ArmPost]; ok {
		names = append(names, ArmPost)
	}
	for _, name := range names {
		a := r.Arms[name]
		fmt.Fprintf(w, "%-14s %7d %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7d %9.1f %8.1f\n", name, a.Count, a.P50, a.P90, a.P95, a.P99, a.P999, a.Max,
			a.Errors+a.SettleErrors, a.AchievedRate, a.Lag.P99MS)
	}
	fmt.Fprintf(w, "%-14s %7s %7.2f %7.2f %7.2f %7.2f %7.2f\n", "hedged/"+r.UnhedgedArm, "", r.Ratio["p50"], r.Ratio["p90"], r.Ratio["p95"], r.Ratio["p99"], r.Ratio["p999"])
	fmt.Fprintf(w, "\n(latency in ms at the client; errors in both phases; lag: how late sends left, in ms)\n")
	budget := "unknown"
	if r.BudgetPct != nil {
		budget = fmt.Sprintf("%g%%", *r.BudgetPct)
	}
	if e := r.ExtraLoad.Envoy; e != nil {
		fmt.Fprintf(w, "extra load, Envoy counters: %.2f%% (%.0f hedges for %.0f requests; budget %s); retries on the unhedged route: %.0f\n", e.Pct, e.Hedges, e.Requests, budget, e.UnhedgedRetries)
		if s := e.Worst; s != nil {
			proxy := ""
			if s.Proxy != "" {
				proxy = ", proxy " + s.Proxy
			}
			fmt.Fprintf(w, "extra load over the worst stretch of %s or more: %.2f%% (%.0f hedges for %.0f requests, %.1fs from %.1fs into the run%s; budget %s)\n",
				s.Window, s.Pct, s.Hedges, s.Requests, s.Seconds, s.StartS, proxy, budget)
		}
	}
	if rl := r.ExtraLoad.Replicas; rl != nil {
		fmt.Fprintf(w, "extra load, at the replicas: %.2f%% (%.0f extra attempts; budget %s)\n", rl.Pct, rl.ExtraAttempts, budget)
		if hit, ok := rl.CacheHitRatio(); ok {
			fmt.Fprintf(w, "cache hit ratio, at the replicas: %.1f%% (%.0f of %.0f lookups)\n", 100*hit, rl.CacheHits, rl.CacheLookups)
		}
	}
	for _, m := range r.ExtraLoad.Missing {
		fmt.Fprintf(w, "not measured: %s\n", m)
	}
	if a := r.Account; a != nil && a.Read {
		fmt.Fprintf(w, "hedge account: %.0f requests hedged late (%.2f%%), %.0f turned away with no hedge (%.2f%%)\n", a.HedgedLate, a.LatePct, a.TurnedAway, a.TurnedAwayPct)
	} else if a != nil {
		fmt.Fprintf(w, "hedge account: %s\n", a.Note)
	}
	if p := r.Posts; p != nil {
		executed := "not counted"
		if p.Executed != nil {
			executed = fmt.Sprintf("%.0f executed", *p.Executed)
		}
		fmt.Fprintf(w, "POSTs: %d sent, %s\n", p.Sent, executed)
	}
	if r.Pass {
		fmt.Fprintln(w, "verdict: PASS")
		return
	}
	fmt.Fprintf(w, "verdict: FAIL\n  - %s\n", strings.Join(r.Reasons, "\n  - "))
}

// Summary is one line of figures, for an Event and a log.
func (r *Report) Summary() string {
	h, u := r.Hedged(), r.Unhedged()
	var b strings.Builder
	fmt.Fprintf(&b, "hedged p99 %.1fms vs %s %.1fms (%.2f, at most %g)", h.P99, r.UnhedgedArm, u.P99, r.Ratio["p99"], r.MaxP99Ratio)
	loads := []string{}
	if e := r.ExtraLoad.Envoy; e != nil {
		loads = append(loads, fmt.Sprintf("%.2f%% (Envoy)", e.Pct))
	}
	if rl := r.ExtraLoad.Replicas; rl != nil {
		loads = append(loads, fmt.Sprintf("%.2f%% (replicas)", rl.Pct))
	}
	if len(loads) == 0 {
		loads = append(loads, "not measured")
	}
	budget := "unknown"
	if r.BudgetPct != nil {
		budget = fmt.Sprintf("%g%%", *r.BudgetPct)
	}
	fmt.Fprintf(&b, "; extra load %s, budget %s", strings.Join(loads, ", "), budget)
	errs := 0
	for _, a := range r.Arms {
		errs += a.Errors + a.SettleErrors
	}
	fmt.Fprintf(&b, "; %d errors; %d requests/s per arm for %s (p99 send lag %.1fms)", errs, r.RatePerArm, r.Duration, max(h.Lag.P99MS, u.Lag.P99MS))
	if p := r.Posts; p != nil && p.Executed != nil {
		fmt.Fprintf(&b, "; POSTs %d sent, %.0f executed", p.Sent, *p.Executed)
	}
	if r.Pass {
		return "PASS: " + b.String()
	}
	return "FAIL (" + strings.Join(r.Reasons, "; ") + "): " + b.String()
}
