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
	"github.com/tailcut/tailcut/test/harness"

	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/model"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// statsEndpoint serves one fake Envoy's stats of one cluster in Envoy's text
// format, from counts the test sets; down makes the scrape fail.
type statsEndpoint struct {
	cluster string
	addr    string
	mu      sync.Mutex
	// requests are the original requests, retries the hedges, fast the
	// requests of at most 16ms.
	requests, retries, fast float64
	down                    bool
}

func newStatsEndpoint(t *testing.T, cluster string) *statsEndpoint {
	t.Helper()
	e := &statsEndpoint{cluster: cluster}
	srv := httptest.NewServer(http.HandlerFunc(e.serve)) // 127.0.0.1:0
	t.Cleanup(srv.Close)
	e.addr = strings.TrimPrefix(srv.URL, "http://")
	return e
}

// serve answers a scrape.
func (e *statsEndpoint) serve(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	l := fmt.Sprintf("envoy_cluster_name=%q", e.cluster)
	_, _ = fmt.Fprintf(w, "# TYPE %[1]s counter\n%[1]s{%[2]s} %[3]g\n# TYPE %[4]s counter\n%[4]s{%[2]s} %[5]g\n",
		retryMetric, l, e.retries, attemptMetric, e.requests+e.retries)
	_, _ = fmt.Fprintf(w, "# TYPE %[1]s histogram\n%[1]s_bucket{%[2]s,le=\"16\"} %[3]g\n%[1]s_bucket{%[2]s,le=\"+Inf\"} %[4]g\n%[1]s_sum{%[2]s} 0\n%[1]s_count{%[2]s} %[4]g\n",
		envoyLatencyMetric, l, e.fast, e.requests)
}

// add counts traffic; restart first sets the counts back to zero.
func (e *statsEndpoint) add(restart bool, requests, retries, fast float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if restart {
		e.requests, e.retries, e.fast = 0, 0, 0
	}
	e.requests += requests
	e.retries += retries
	e.fast += fast
}

func (e *statsEndpoint) setDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = down
}

// attempts is what upstream_rq_total shows, or -1 while the scrape fails.
func (e *statsEndpoint) attempts() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		return -1
	}
	return e.requests + e.retries
}

// TestRealPrometheusProxyRestart: two fake Envoys of one cluster are two
// targets of the job a real Prometheus scrapes every second. Each has a
// lifetime of 1,000 requests, 15% of them hedged at older delays. Then each
// serves 100 requests between ticks, 5% hedged; one restarts (its counters go
// back to 0) and the other misses scrapes for a tick. The reading over the
// ticks counts the traffic of the ticks, 800 requests and 40 hedges, not a
// proxy's lifetime: with the proxies summed in PromQL, the fall of the sum at
// the restart was read as a reset and the reading counted 3,200 requests,
// 11.25% hedged.
func TestRealPrometheusProxyRestart(t *testing.T) {
	harness.Binary(t, "PROMETHEUS_BIN", "prometheus") // StartPrometheus runs it: fail before anything starts
	policy := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay.Auto.Window = dur(5 * time.Minute)
		p.Spec.EvaluationInterval = dur(5 * time.Second)
	})
	cluster := plan.ClusterName(policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port)
	a, b := newStatsEndpoint(t, cluster), newStatsEndpoint(t, cluster)
	a.add(false, 1000, 150, 700)
	b.add(false, 1000, 150, 700)
	promURL := harness.StartPrometheus(t, "/metrics", a.addr, b.addr)
	est, err := NewPrometheus(PrometheusOptions{Address: promURL})
	if err != nil {
		t.Fatal(err)
	}
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*policy.DeepCopy()}, nil
	}, nil, logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// tick waits until Prometheus holds the endpoints' counts, then the
	// sampler reads them.
	tick := func(step string) {
		t.Helper()
		want := map[string]float64{a.addr: a.attempts(), b.addr: b.attempts()}
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := est.query(ctx, attemptMetric, time.Now())
			got := map[string]float64{}
			if vec, ok := v.(model.Vector); ok {
				for _, s := range vec {
					got[string(s.Metric["instance"])] = float64(s.Value)
				}
			}
			done := err == nil
			for addr, n := range want {
				if g, ok := got[addr]; (n < 0) == ok || ok && g != n {
					done = false
				}
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Prometheus shows %v (%v), want %v (-1: not scraped)", step, got, err, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sampler.Tick(ctx, time.Now())
	}
	tick("lifetime")
	a.add(false, 100, 5, 95)
	b.add(false, 100, 5, 95)
	tick("both serve")
	a.add(true, 100, 5, 95) // restarted, then served
	b.add(false, 100, 5, 95)
	tick("a restarted")
	b.setDown(true)
	a.add(false, 100, 5, 95)
	b.add(false, 100, 5, 95) // counted, not scraped
	tick("b not scraped")
	b.setDown(false)
	a.add(false, 100, 5, 95)
	b.add(false, 100, 5, 95)
	tick("b back")

	now := time.Now()
	auto := policy.Spec.EffectiveAuto()
	sp := readSpan(policy, &auto, now)
	ans, sp, ok := est.sampled(policy, &auto, sp)
	if !ok {
		t.Fatal("the sampler read nothing")
	}
	qs, err := buildQueries(policy, &auto, sp.rng)
	if err != nil {
		t.Fatal(err)
	}
	r := est.interpret(policy, &auto, qs, sp, ans)
	if r.hedge == nil {
		t.Fatalf("no hedge reading: %s", r.hedgeNote)
	}
	// a: 100 at each of four ticks (at the restart its new count); b: 100,
	// 100, nothing while not scraped, then 200 since it was last seen.
	fast := 0.0
	for le, v := range bucketsOf(ans.buckets) {
		if f, err := strconv.ParseFloat(le, 64); err == nil && f == 16 {
			fast = v
		}
	}
	t.Logf("read %.0f requests (%.0f in the histogram, %.0f of them under 16ms), %.0f hedged: %.2f%%",
		r.hedge.requests, r.samples, fast, r.hedge.retries, r.hedge.percent())
	if r.hedge.requests != 800 || r.hedge.retries != 40 || r.samples != 800 || fast != 760 {
		t.Errorf("read %.0f requests (%.0f in the histogram, %.0f under 16ms), %.0f hedged; want 800 (800, 760), 40 hedged",
			r.hedge.requests, r.samples, fast, r.hedge.retries)
	}
	if p := r.hedge.percent(); math.Abs(p-5) > 1e-9 {
		t.Errorf("hedge rate %.2f%%, want the traffic's 5%%", p)
	}
}
