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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// The estimator against a real Prometheus server scraping an exporter that
// speaks Envoy's metric names, fed with observations of known distributions.
// Time is real here (Prometheus stores real samples), so the windows are short:
// 15s windows, 1s scrapes, 5s evaluation intervals, about a minute in all.

const (
	realWindow   = 15 * time.Second
	realInterval = 5 * time.Second
	// realRate is observations per second per scenario.
	realRate = 200
	// realRounds evaluations run once the first window is full.
	realRounds = 6
)

// scenario is one simulated service: its bypass cluster's latency
// distribution (ms), which may change after round 0, and optionally the hedge
// counters of its hedged cluster.
type scenario struct {
	name string
	// sample draws one latency in ms; after is used once shifted.
	sample, after func(r *rand.Rand) float64
	// cdf and cdfAfter are the true distributions, for the assertions.
	cdf, cdfAfter func(ms float64) float64
	// hedgeShare, when positive, exports hedge counters at that rate.
	hedgeShare float64
	mutate     func(*tailcutv1alpha1.HedgePolicy)

	mu      sync.Mutex
	shifted bool
}

func (s *scenario) shift() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shifted = true
}

func (s *scenario) current() (func(*rand.Rand) float64, func(float64) float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shifted && s.after != nil {
		return s.after, s.cdfAfter
	}
	return s.sample, s.cdf
}

func bimodalSampler(fast, slow float64) func(*rand.Rand) float64 {
	return func(r *rand.Rand) float64 {
		v := fast + r.NormFloat64()
		if r.Float64() < slow {
			v += 100
		}
		return math.Max(v, 0.1)
	}
}

func lognormalSampler(median, sigma float64) func(*rand.Rand) float64 {
	return func(r *rand.Rand) float64 { return median * math.Exp(sigma*r.NormFloat64()) }
}

func TestRealPrometheus(t *testing.T) {
	bin := os.Getenv("PROMETHEUS_BIN")
	if bin == "" {
		t.Fatal("PROMETHEUS_BIN is not set: run PROMETHEUS_BIN=$(hack/tools.sh prometheus) go test ./controllers/estimate/... (the Makefile's test target sets it)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("PROMETHEUS_BIN=%s: %v", bin, err)
	}

	scenarios := []*scenario{
		{name: "bimodal3", sample: bimodalSampler(15, 0.03), cdf: bimodal(15, 0.03), hedgeShare: 0.03},
		{name: "step5", sample: bimodalSampler(15, 0.05), cdf: bimodal(15, 0.05)},
		{name: "lognormal", sample: lognormalSampler(20, 0.5), cdf: lognormal(20, 0.5)},
		{name: "shift", sample: bimodalSampler(15, 0.03), cdf: bimodal(15, 0.03),
			after: bimodalSampler(40, 0.03), cdfAfter: bimodal(40, 0.03),
			// Two moves of at most 100% reach 40ms from 17ms.
			mutate: auto(func(a *tailcutv1alpha1.AutoDelay) { a.MaxStepPercent = 100 })},
		{name: "saturation", sample: bimodalSampler(15, 0.03), cdf: bimodal(15, 0.03),
			after: bimodalSampler(40, 0.03), cdfAfter: bimodal(40, 0.03), hedgeShare: 0.04},
	}

	exporter := startExporter(t, scenarios)
	promURL := startPrometheus(t, bin, exporter)
	waitFor(t, 30*time.Second, "the exporter to be scraped", func() bool {
		v, err := instantQuery(promURL, `count(envoy_cluster_upstream_rq_time_count)`)
		return err == nil && v >= float64(len(scenarios))
	})
	warmUntil := time.Now().Add(realWindow + 3*time.Second)

	est, err := NewPrometheus(PrometheusOptions{Address: promURL})
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*tailcutv1alpha1.HedgePolicy{}
	for _, s := range scenarios {
		p := testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
			a.Window = dur(realWindow)
			a.StaleAfter = dur(time.Minute)
		}), func(p *tailcutv1alpha1.HedgePolicy) {
			p.Name = s.name
			p.Spec.TargetRef.Name = s.name
			p.Spec.EvaluationInterval = dur(realInterval)
		})
		if s.mutate != nil {
			s.mutate(p)
		}
		policies[s.name] = p
	}

	time.Sleep(time.Until(warmUntil))
	start := time.Now()
	for round := range realRounds {
		// A little over the interval, so the one-change rule never holds a
		// move by a few milliseconds.
		time.Sleep(time.Until(start.Add(time.Duration(round) * (realInterval + 200*time.Millisecond))))
		for _, s := range scenarios {
			p := policies[s.name]
			evalAt := time.Now()
			res, err := est.Estimate(context.Background(), p, evalAt)
			if err != nil {
				t.Fatalf("%s round %d: %v", s.name, round, err)
			}
			checkInvariants(t, p, res)
			applyLikeController(t, p, res, evalAt)
			check(t, s, round, res)
		}
		if round == 0 {
			for _, s := range scenarios {
				if s.after != nil {
					s.shift()
				}
			}
		}
	}
}

// check asserts one evaluation of a scenario and logs the figures.
func check(t *testing.T, s *scenario, round int, res Result) {
	t.Helper()
	_, F := s.current()
	d := float64(res.Delay) / float64(time.Millisecond)
	trueQ := quantileOf(F, 0.95)
	extra := 1 - F(d)
	raw, samples := "-", int64(0)
	if res.Quantile != nil {
		raw, samples = res.Quantile.Value.Duration.Round(100*time.Microsecond).String(), res.Quantile.Samples
	}
	measured := "-"
	if res.HedgeRate != nil {
		measured = fmt.Sprintf("%.2f%%", res.HedgeRate.Percent)
	}
	trueNote := fmt.Sprintf("%.1fms", trueQ)
	if s.name == "step5" {
		trueNote = fmt.Sprintf("on the step, anywhere in %.0f..%.0fms", quantileOf(F, 0.9495), quantileOf(F, 0.9505))
	}
	implied := fmt.Sprintf("%.2f%%", 100*extra)
	if res.Delay == 0 {
		implied = "0 (hedging off)"
	}
	t.Logf("%-10s round %d: true p95 %s, Prometheus p95 %s over %d samples, derived delay %s, implied hedge rate S(d) %s, measured hedge rate %s [%s]",
		s.name, round, trueNote, raw, samples, res.Delay, implied, measured, res.DerivedReason)

	if !res.Derived {
		t.Errorf("%s round %d: no delay derived: %s", s.name, round, res.Reason)
		return
	}
	allowance := (1 + stepTolerance) * 0.05
	switch s.name {
	case "bimodal3", "step5":
		// Above the fast mode, clearly below the slow one, within budget.
		if d <= 15 || d >= 30 {
			t.Errorf("%s round %d: delay %s, want above the 15ms fast mode and clearly below the 115ms slow mode (%s)", s.name, round, res.Delay, res.Reason)
		}
		if extra > allowance {
			t.Errorf("%s round %d: implied extra load %.2f%% above %.2f%%", s.name, round, 100*extra, 100*allowance)
		}
		if s.name == "bimodal3" && (res.HedgeRate == nil || math.Abs(res.HedgeRate.Percent-3) > 0.5) {
			t.Errorf("%s round %d: measured hedge rate %+v, want about 3%%", s.name, round, res.HedgeRate)
		}
	case "lognormal":
		if math.Abs(d-trueQ)/trueQ > 0.15 {
			t.Errorf("lognormal round %d: delay %s, want within 15%% of the true p95 %.1fms", round, res.Delay, trueQ)
		}
		if extra > allowance {
			t.Errorf("lognormal round %d: implied extra load %.2f%% above %.2f%%", round, 100*extra, 100*allowance)
		}
	case "shift":
		// The fast mode moved 15 -> 40ms after round 0: the delay follows within
		// two evaluation intervals.
		if round >= 2 && (d <= 40 || d >= 60 || extra > allowance) {
			t.Errorf("shift round %d: delay %s (extra %.2f%%), want above the new 40ms fast mode within two intervals (%s)",
				round, res.Delay, 100*extra, res.Reason)
		}
	case "saturation":
		// The same shift while hedges are 4% of requests: the unhedged median
		// more than doubles between two windows, so hedging pauses, and the
		// pause holds for the rest of the run.
		if (round == 3 || round == 4) && (res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts) {
			t.Errorf("saturation round %d: got %s from %s (%s: %s), want hedging paused, HedgingHurts",
				round, res.Delay, res.Source, res.DerivedReason, res.Reason)
		}
		if round == 0 && res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("saturation round 0: got %s (%s), want hedging on", res.Source, res.Reason)
		}
	}
}

// applyLikeController writes a Result into status the way the reconciler does,
// through a JSON round trip so times lose their sub-second part as they do in
// the API server.
func applyLikeController(t *testing.T, p *tailcutv1alpha1.HedgePolicy, res Result, now time.Time) {
	t.Helper()
	st := p.Status.DeepCopy()
	var delay *metav1.Duration
	if res.Delay > 0 {
		delay = dur(res.Delay)
	}
	if (delay == nil) != (st.EffectiveDelay == nil) || (delay != nil && delay.Duration != st.EffectiveDelay.Duration) {
		nt := metav1.NewTime(now)
		st.LastDelayChange = &nt
	}
	st.EffectiveDelay, st.DelaySource, st.DelayReason = delay, res.Source, res.Reason
	if res.Quantile != nil {
		st.Quantile = res.Quantile
	}
	if res.HedgeRate != nil {
		st.HedgeRate = res.HedgeRate
	}
	cs := metav1.ConditionFalse
	if res.Derived {
		cs = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tailcutv1alpha1.ConditionDelayDerived, Status: cs,
		Reason: res.DerivedReason, Message: res.Reason, ObservedGeneration: p.Generation, LastTransitionTime: metav1.NewTime(now)})
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	p.Status = tailcutv1alpha1.HedgePolicyStatus{}
	if err := json.Unmarshal(b, &p.Status); err != nil {
		t.Fatal(err)
	}
}

// startExporter serves Envoy-named metrics for every scenario on 127.0.0.1 and
// feeds them realRate observations per second until the test ends.
func startExporter(t *testing.T, scenarios []*scenario) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envoy_cluster_upstream_rq_time", Help: "Upstream request time (ms).", Buckets: envoyBoundsMS,
	}, []string{envoyClusterLabel})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq_retry", Help: "Retries and hedges."},
		[]string{envoyClusterLabel})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq_total", Help: "Upstream attempts."},
		[]string{envoyClusterLabel})
	reg.MustRegister(latency, retries, attempts)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	const tick = 20 * time.Millisecond
	perTick := realRate * tick.Seconds()
	for i, s := range scenarios {
		hedged, bypass := ClusterNames("shop", s.name, 8080)
		rng := rand.New(rand.NewPCG(uint64(i)+1, 42))
		wg.Go(func() {
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
				draw, _ := s.current()
				for range int(perTick) {
					latency.WithLabelValues(bypass).Observe(draw(rng))
				}
				if s.hedgeShare > 0 {
					// The hedged route carries 10x the bypass traffic.
					n := 10 * perTick
					attempts.WithLabelValues(hedged).Add(n * (1 + s.hedgeShare))
					retries.WithLabelValues(hedged).Add(n * s.hedgeShare)
				}
			}
		})
	}
	return strings.TrimPrefix(srv.URL, "http://")
}

// startPrometheus runs the server on a free 127.0.0.1 port with a temporary
// config and storage, and stops it by PID when the test ends.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: envoy\n    static_configs:\n      - targets: [%q]\n", target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()

	var logs bytes.Buffer
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=1h",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	u := "http://" + addr
	waitFor(t, 30*time.Second, "prometheus to be ready", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited early:\n%s", logs.String())
		default:
		}
		resp, err := http.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return u
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// instantQuery returns the single value of a query, for test set-up only.
func instantQuery(base, q string) (float64, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("%d series", len(body.Data.Result))
	}
	var v float64
	_, err = fmt.Sscan(fmt.Sprint(body.Data.Result[0].Value[1]), &v)
	return v, err
}
