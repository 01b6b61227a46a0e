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
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/test/harness"
)

// upstream stands in for a proxy and its replicas with a known distribution:
// every 20th bypass request takes 100ms, every hedged request is fast. Its
// "admin" counts 4 hedges per 100 hedged requests, and its "replicas" count
// the same attempts and one execution per POST.
type upstream struct {
	hedged, bypass, posts atomic.Int64
	postDelay             time.Duration
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost:
		u.posts.Add(1)
		time.Sleep(u.postDelay)
	case r.Header.Get(BypassHeader) == "1":
		if u.bypass.Add(1)%20 == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	default:
		u.hedged.Add(1)
	}
}

func (u *upstream) admin(w http.ResponseWriter, r *http.Request) {
	if f := r.URL.Query().Get("filter"); f != "" && !strings.Contains(f, "tailcut_demo_web_80") && !strings.Contains(f, "tailcut_account") {
		http.Error(w, "unexpected filter "+r.URL.Query().Get("filter"), http.StatusBadRequest)
		return
	}
	h := u.hedged.Load()
	hedges := h * 4 / 100
	fmt.Fprintf(w, "# TYPE envoy_cluster_upstream_rq_total counter\n")
	fmt.Fprintf(w, "envoy_cluster_upstream_rq_total{envoy_cluster_name=\"tailcut_demo_web_80\"} %d\n", h+hedges)
	fmt.Fprintf(w, "envoy_cluster_upstream_rq_total{envoy_cluster_name=\"tailcut_demo_web_80_bypass\"} %d\n", u.bypass.Load()+u.posts.Load())
	fmt.Fprintf(w, "# TYPE envoy_cluster_upstream_rq_retry counter\n")
	fmt.Fprintf(w, "envoy_cluster_upstream_rq_retry{envoy_cluster_name=\"tailcut_demo_web_80\"} %d\n", hedges)
	fmt.Fprintf(w, "envoy_cluster_upstream_rq_retry{envoy_cluster_name=\"tailcut_demo_web_80_bypass\"} 0\n")
	// The hedge account: one hedged request in 10 hedged late, one in 50
	// turned away; another policy's counters beside them.
	fmt.Fprintf(w, "# TYPE tailcut_account_hedged_late counter\n")
	fmt.Fprintf(w, "tailcut_account_hedged_late{policy=\"demo/web\"} %d\n", h/10)
	fmt.Fprintf(w, "tailcut_account_hedged_late{policy=\"demo/other\"} %d\n", 7*h)
	fmt.Fprintf(w, "# TYPE tailcut_account_turned_away counter\n")
	fmt.Fprintf(w, "tailcut_account_turned_away{policy=\"demo/web\"} %d\n", h/50)
	fmt.Fprintf(w, "tailcut_account_turned_away{policy=\"demo/other\"} %d\n", 9*h)
}

func (u *upstream) metrics(w http.ResponseWriter, _ *http.Request) {
	h := u.hedged.Load()
	fmt.Fprintf(w, "# TYPE workload_requests_total counter\nworkload_requests_total{method=\"GET\"} %d\nworkload_requests_total{method=\"POST\"} %d\n", h+h*4/100+u.bypass.Load(), u.posts.Load())
	fmt.Fprintf(w, "# TYPE workload_envoy_attempts_total counter\nworkload_envoy_attempts_total{attempt=\"1\"} %d\nworkload_envoy_attempts_total{attempt=\"2\"} %d\n", h+u.bypass.Load(), h*4/100)
	fmt.Fprintf(w, "# TYPE workload_side_effects_total counter\nworkload_side_effects_total %d\n", u.posts.Load())
	// A cache that hits three hedged requests in four.
	fmt.Fprintf(w, "# TYPE workload_cache_requests_total counter\nworkload_cache_requests_total{result=\"hit\"} %d\nworkload_cache_requests_total{result=\"miss\"} %d\n", h*3/4, h-h*3/4)
}

func serve(t *testing.T, u *upstream) (proxy, admin, metrics string) {
	t.Helper()
	p := httptest.NewServer(u)
	a := httptest.NewServer(http.HandlerFunc(u.admin))
	m := httptest.NewServer(http.HandlerFunc(u.metrics))
	t.Cleanup(func() { p.Close(); a.Close(); m.Close() })
	return p.URL, a.URL, m.URL + "/metrics"
}

func options(proxy string) Options {
	o := Options{
		URL: proxy + "/", Host: "web.demo", Unhedged: ArmBypass, Rate: 200, PostRate: 20,
		Settle: 500 * time.Millisecond, Duration: 2 * time.Second,
		Criteria: DefaultCriteria(), Limits: DefaultLimits(), BudgetPct: ptr(5.0),
	}
	o.HedgedCluster, o.UnhedgedCluster = ClustersOf("demo", "web", 80)
	o.Policy = "demo/web"
	return o
}

// A run against a known distribution finds it: the p99 of the bypass arm is on
// the 100ms step (5% of requests), the hedged arm is fast, the extra load is
// the 4% the admin counts, and each POST ran once.
func TestRunMeasuresAKnownDistribution(t *testing.T) {
	u := &upstream{}
	proxy, admin, metrics := serve(t, u)
	o := options(proxy)
	o.EnvoyAdmin, o.WorkloadMetrics = []string{admin}, []string{metrics}
	// This test checks the figures, not the rate; TestALateGeneratorIsAnInvalidRun does.
	o.Criteria.LateAfter = time.Second
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	h, b := r.Hedged(), r.Unhedged()
	if b.P99 < 100 || h.P99 >= 50 {
		t.Errorf("p99: bypass %.1fms (want >= 100), hedged %.1fms (want < 50)", b.P99, h.P99)
	}
	if h.Sent != 400 || h.SettleSent != 100 || b.Sent != 400 || h.Scheduled != 400 {
		t.Errorf("sent %d+%d hedged, %d bypass, scheduled %d; want 400+100, 400, 400", h.Sent, h.SettleSent, b.Sent, h.Scheduled)
	}
	if h.AchievedRate < 190 || h.AchievedRate > 210 {
		t.Errorf("achieved rate %.1f/s, want about 200", h.AchievedRate)
	}
	e := r.ExtraLoad.Envoy
	// 500 hedged requests, 4 per 100 hedged: 20 hedges.
	if e == nil || e.Requests != 500 || e.Hedges != 20 || e.Pct != 4 || e.UnhedgedRetries != 0 {
		t.Errorf("Envoy's extra load: %+v, want 20 hedges for 500 requests (4%%)", e)
	}
	if rl := r.ExtraLoad.Replicas; rl == nil || rl.ExtraAttempts != 20 || rl.Pct != 4 {
		t.Errorf("the replicas' extra load: %+v, want 20 extra attempts (4%%)", rl)
	}
	if hit, ok := r.ExtraLoad.Replicas.CacheHitRatio(); !ok || hit != 0.75 || r.ExtraLoad.Replicas.CacheLookups != 500 {
		t.Errorf("cache: %+v, want 375 hits of 500 lookups", r.ExtraLoad.Replicas)
	}
	if r.Posts == nil || r.Posts.Sent != 50 || r.Posts.Executed == nil || *r.Posts.Executed != 50 {
		t.Errorf("POSTs: %+v, want 50 sent and executed", r.Posts)
	}
	// Of 500 hedged requests, demo/web's account hedged 50 late and turned 10 away.
	if a := r.Account; a == nil || !a.Read || a.HedgedLate != 50 || a.TurnedAway != 10 || a.LatePct != 10 || a.TurnedAwayPct != 2 {
		t.Errorf("the hedge account: %+v, want 50 hedged late (10%%) and 10 turned away (2%%)", a)
	}
	// 2.5 s of load: no stretch of a 30 s window to judge, and the report says so.
	if e != nil && (e.Worst != nil || !slices.ContainsFunc(r.ExtraLoad.Missing, func(m string) bool { return strings.Contains(m, "the run was shorter") })) {
		t.Errorf("stretch %+v, not measured %q: want none, and the report to say why", e.Worst, r.ExtraLoad.Missing)
	}
	if !r.Pass {
		t.Errorf("verdict FAIL: %q", r.Reasons)
	}
}

// Where the hedge account's counters cannot be read for the policy, the
// report says why, and the verdict does not depend on them.
func TestRunSaysWhyTheAccountWasNotRead(t *testing.T) {
	u := &upstream{}
	proxy, admin, _ := serve(t, u)
	for _, tc := range []struct{ policy, says string }{
		{"", "give --policy"},
		{"demo/absent", "the proxies export no hedge account counters of demo/absent"},
	} {
		o := options(proxy)
		o.EnvoyAdmin, o.Policy, o.PostRate = []string{admin}, tc.policy, 0
		o.Settle, o.Duration, o.Criteria.LateAfter = 0, time.Second, time.Second
		r, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if a := r.Account; a == nil || a.Read || !strings.Contains(a.Note, tc.says) {
			t.Errorf("policy %q: the hedge account %+v, want it not read because %q", tc.policy, a, tc.says)
		}
		var text strings.Builder
		r.PrintTable(&text)
		if !strings.Contains(text.String(), "hedge account: ") || !r.Pass {
			t.Errorf("policy %q: pass %v, reasons %q; the report:\n%s", tc.policy, r.Pass, r.Reasons, text.String())
		}
	}
}

// A generator held to one worker and one connection against a server that
// takes 20ms cannot send 200/s: the run is invalid, and says so.
func TestALateGeneratorIsAnInvalidRun(t *testing.T) {
	u := &upstream{postDelay: 20 * time.Millisecond}
	proxy, admin, _ := serve(t, u)
	o := options(proxy)
	o.EnvoyAdmin = []string{admin}
	o.Rate, o.PostRate = 50, 200
	o.Limits.MaxWorkers, o.Limits.MaxConnections = 1, 1
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	post := r.Arms[ArmPost]
	if r.Pass || !strings.Contains(strings.Join(r.Reasons, "\n"), "invalid run") {
		t.Fatalf("want an invalid run, got pass=%v %q", r.Pass, r.Reasons)
	}
	// 50 requests a second fit one worker at 20ms each; 200 do not.
	if post.Lag.Late < post.Sent/2 || post.Lag.MaxMS < 100 {
		t.Errorf("post stream: %d of %d late, max lag %.1fms; want most late by far", post.Lag.Late, post.Sent, post.Lag.MaxMS)
	}
}

// The schedule is vegeta's own (hit n, from 0, at n+1 intervals): at 5/s, where
// an interval is 200ms, an offset by one would put every send 200ms late. The
// median lag is checked, not the max, which a busy machine can stretch.
func TestTheScheduleIsTheGenerators(t *testing.T) {
	u := &upstream{}
	proxy, _, _ := serve(t, u)
	out := attack(context.Background(), []stream{{name: "slow", rate: 5, targets: []vegetaTarget{get(proxy+"/", nil)}}}, 0, 2*time.Second, DefaultLimits(), nil)
	ss := out["slow"]
	if len(ss) != 10 {
		t.Fatalf("sent %d, want 10", len(ss))
	}
	lags := make([]float64, len(ss))
	for i, s := range ss {
		lags[i] = float64(s.lag.Microseconds()) / 1000
		if want := time.Duration(i+1) * 200 * time.Millisecond; s.scheduled != want {
			t.Errorf("request %d scheduled at %s, want %s", i, s.scheduled, want)
		}
	}
	sort.Float64s(lags)
	if med := rank(lags, 50); med < 0 || med > 20 {
		t.Errorf("median send lag %.1fms, want about 0 (lags %v)", med, lags)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	var b strings.Builder
	for _, args := range [][]string{
		{},
		{"--url", "web:80", "--host", "x"},
		{"--url", "http://p/", "--host", "x", "--unhedged", "direct"},
		{"--url", "http://p/", "--host", "x", "--rate", "0"},
		{"--url", "http://p/", "--host", "x", "--envoy-admin", "http://a"},
		{"--url", "http://p/", "--host", "x", "--budget-percent", "5", "--envoy-admin", "http://a", "--cluster", "c", "--key-header", "k", "--zipf", "1"},
		{"--url", "http://p/", "--host", "x", "--budget-percent", "5", "--envoy-admin", "http://a", "--cluster", "c", "--key-header", "k", "--keys", "0"},
	} {
		o, _, err := parse(args, &b)
		if err == nil {
			err = o.check()
		}
		if err == nil {
			t.Errorf("%q: want an error", args)
		}
	}
	if _, _, err := parse([]string{"--record", "--url", "http://p/"}, &b); err == nil || !strings.Contains(err.Error(), "--record needs --policy") {
		t.Errorf("--record without --policy: %v", err)
	}
	if code := Command(context.Background(), []string{"--url", "nope"}, &b, &b); code != ExitError {
		t.Errorf("bad flags: exit %d, want %d", code, ExitError)
	}
}

// Through a real Prometheus scraping the "admin" as a proxy every second: the
// run waits until Prometheus has scraped past its end, then reads each
// series' increase, and the worst stretch of 30 s or more from the proxy's
// scrapes.
func TestRunReadsEnvoyThroughPrometheus(t *testing.T) {
	u := &upstream{}
	proxy, admin, metrics := serve(t, u)
	adminURL, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	prom := harness.StartPrometheus(t, "/stats", adminURL.Host)
	harness.WaitScraped(t, prom, 1)
	o := options(proxy)
	o.PrometheusURL, o.WorkloadMetrics = prom, []string{metrics}
	o.Rate, o.PostRate, o.Duration = 100, 10, 31*time.Second
	o.Criteria.LateAfter = time.Second
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	e := r.ExtraLoad.Envoy
	if e == nil {
		t.Fatalf("Envoy's counters not read: %q", r.ExtraLoad.Missing)
	}
	// 3,150 hedged requests in the run, 4 per 100 hedged; the scrape before
	// the run may already hold some of the settling phase's first requests.
	if e.Requests < 3000 || e.Requests > 3150 || e.Pct < 3.9 || e.Pct > 4.1 || e.UnhedgedRetries != 0 {
		t.Errorf("Envoy's extra load through Prometheus: %+v, want about 126 hedges for 3,150 requests (4%%)", e)
	}
	// The admin counts 4 hedges per 100 requests, rounded down over the
	// run: a stretch holds 4% of its requests, give or take a hedge.
	w := e.Worst
	t.Logf("whole run %+v; worst stretch %+v", *e, w)
	if w == nil {
		t.Fatalf("no stretch read through Prometheus: %q", r.ExtraLoad.Missing)
	}
	if w.Proxy != adminURL.Host || w.Seconds < 30 || w.Requests < 2900 || math.Abs(w.Hedges-0.04*w.Requests) > 1 || w.Readings < 30 {
		t.Errorf("worst stretch %+v, want about 4%% of 3,000 requests over 30 s or more, of the proxy %s's 30 or more scrapes", w, adminURL.Host)
	}
	// The account's counters through the same Prometheus: one in 10 late,
	// one in 50 turned away, rounded down at each scrape.
	if a := r.Account; a == nil || !a.Read || math.Abs(a.LatePct-10) > 0.2 || math.Abs(a.TurnedAwayPct-2) > 0.2 {
		t.Errorf("the hedge account through Prometheus: %+v, want about 10%% hedged late and 2%% turned away", a)
	}
	if !r.Pass {
		t.Errorf("verdict FAIL: %v", r.Reasons)
	}
}
