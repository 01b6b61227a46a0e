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
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBimodalShareOfSlowRequests(t *testing.T) {
	cfg := DefaultConfig()
	slow := 0
	const n = 10000
	for i := range n {
		// A deterministic sweep of the uniform variate: exactly 5% fall below 0.05.
		if latency(cfg, (float64(i)+0.5)/n, 0) > cfg.Base.D() {
			slow++
		}
	}
	if slow != 500 {
		t.Errorf("%d of %d slow, want 500", slow, n)
	}
	if d := latency(cfg, 0.01, 0); d != 115*time.Millisecond {
		t.Errorf("slow latency %v, want 115ms", d)
	}
}

func TestLognormalMedian(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model = Lognormal
	if d := latency(cfg, 0, 0); d != cfg.Median.D() {
		t.Errorf("latency at z=0 is %v, want the median %v", d, cfg.Median.D())
	}
	if d := latency(cfg, 0, 2); d <= cfg.Median.D()*2 {
		t.Errorf("latency at z=2 is %v, want well above the median", d)
	}
}

func TestStallRemaining(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model = Stall
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.stallRemaining(cfg, s.start.Add(50*time.Millisecond)); got != 100*time.Millisecond {
		t.Errorf("50ms into a 150ms pause: remaining %v, want 100ms", got)
	}
	if got := s.stallRemaining(cfg, s.start.Add(time.Second)); got != 0 {
		t.Errorf("outside the pause: remaining %v, want 0", got)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Model = "spiky" }, `model "spiky" is not one of`},
		{func(c *Config) { c.SlowProbability = 1.5 }, "slowProbability 1.5 is not in [0, 1]"},
		{func(c *Config) { c.FailProbability = -0.1 }, "failProbability -0.1 is not in [0, 1]"},
		{func(c *Config) { c.Model = Stall; c.StallFor = c.StallEvery }, "stallFor < stallEvery"},
		{func(c *Config) { c.Model = Saturation; c.Concurrency = 0 }, "concurrency >= 1"},
		{func(c *Config) { c.Model = Lognormal; c.Sigma = 0 }, "sigma in (0, 3]"},
		{func(c *Config) { c.Model = Cache; c.CacheSize = 0 }, "cacheSize between 1 and 10000000"},
		{func(c *Config) { c.Model = Cache; c.MissExtra = -1 }, "durations must not be negative"},
	} {
		cfg := DefaultConfig()
		c.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

func newTestServer(t *testing.T, cfg Config) (*httptest.Server, *metrics, *Server) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(prometheus.NewRegistry(), "r1")
	ts := httptest.NewServer(handler(srv, m))
	t.Cleanup(ts.Close)
	return ts, m, srv
}

func TestCancelledRequestStopsAndIsCounted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model, cfg.BadHost, cfg.SlowExtra = BadHost, true, Duration(5*time.Second)
	ts, m, _ := newTestServer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/x", nil)
	start := time.Now()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request to a 5s replica finished inside 100ms")
	}
	deadline := time.Now().Add(3 * time.Second)
	for testutil.ToFloat64(m.cancelled) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(m.cancelled); got != 1 {
		t.Fatalf("cancelled = %v, want 1", got)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the server kept working for %v after the cancel", el)
	}
}

func TestSideEffectsAndAttemptsAreCounted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SlowProbability, cfg.Base = 0, 0
	ts, m, _ := newTestServer(t, cfg)
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPost, http.MethodPut} {
		req, _ := http.NewRequest(method, ts.URL+"/orders", strings.NewReader("{}"))
		req.Header.Set("x-envoy-attempt-count", "2")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := testutil.ToFloat64(m.sideEffects.WithLabelValues("POST")); got != 2 {
		t.Errorf("POST side effects = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.sideEffects.WithLabelValues("PUT")); got != 1 {
		t.Errorf("PUT side effects = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("GET")); got != 1 {
		t.Errorf("GET requests = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.attempts.WithLabelValues("2")); got != 4 {
		t.Errorf("attempt-2 = %v, want 4", got)
	}
}

// TestFailProbabilityAnswers503 checks the brownout knob against the binomial
// distribution: 2,000 requests at failProbability 0.3 give 600 failures, and
// 4.1 standard deviations (sqrt(2000*0.3*0.7) = 20.5) is 84.
func TestFailProbabilityAnswers503(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SlowProbability, cfg.Base, cfg.FailProbability = 0, 0, 0.3
	ts, m, _ := newTestServer(t, cfg)
	failed := 0
	for range 2000 {
		resp, err := http.Get(ts.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			failed++
		case http.StatusOK:
		default:
			t.Fatalf("status %d, want 200 or 503", resp.StatusCode)
		}
	}
	if failed < 600-84 || failed > 600+84 {
		t.Errorf("%d of 2000 requests failed at failProbability 0.3, want 600 +- 84", failed)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("GET")); got != 2000 {
		t.Errorf("requests counted %v, want 2000 (failed ones too)", got)
	}
}

func TestConfigEndpoint(t *testing.T) {
	ts, _, srv := newTestServer(t, DefaultConfig())
	put := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, ts.URL+"/config", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(`{"model":"saturation","concurrency":2,"base":"20ms"}`); code != 200 || !strings.Contains(body, `"model":"saturation"`) {
		t.Fatalf("PUT saturation: %d %s", code, body)
	}
	if c := srv.Config(); c.Model != Saturation || c.Concurrency != 2 || c.Base.D() != 20*time.Millisecond {
		t.Errorf("config after PUT: %+v", c)
	}
	if code, body := put(`{"model":"spiky"}`); code != 400 || !strings.Contains(body, `model "spiky"`) {
		t.Errorf("PUT bad model: %d %s", code, body)
	}
	if code, body := put(`{"modle":"bimodal"}`); code != 400 || !strings.Contains(body, "unknown field") {
		t.Errorf("PUT unknown field: %d %s", code, body)
	}
	if c := srv.Config(); c.Model != Saturation {
		t.Errorf("a rejected PUT changed the config to %+v", c)
	}
}

// TestSaturationQueues checks that load beyond the concurrency limit waits: with
// 2 slots of 50ms, 6 concurrent requests need three rounds.
func TestSaturationQueues(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model, cfg.Concurrency, cfg.Base = Saturation, 2, Duration(50*time.Millisecond)
	ts, _, _ := newTestServer(t, cfg)
	var wg sync.WaitGroup
	start := time.Now()
	for range 6 {
		wg.Go(func() {
			resp, err := http.Get(ts.URL + "/")
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if el := time.Since(start); el < 140*time.Millisecond {
		t.Errorf("6 requests through 2 slots of 50ms took %v, want at least 150ms", el)
	}
}

func TestRunRejectsBadFlagsAndEnv(t *testing.T) {
	if err := run([]string{"-model", "spiky"}); err == nil || !strings.Contains(err.Error(), `model "spiky"`) {
		t.Errorf("run with a bad model: %v", err)
	}
	t.Setenv("WORKLOAD_CONFIG", `{"model":`)
	if err := run(nil); err == nil || !strings.Contains(err.Error(), "WORKLOAD_CONFIG") {
		t.Errorf("run with bad WORKLOAD_CONFIG: %v", err)
	}
}

func TestLRUKeepsTheMostRecentlyUsed(t *testing.T) {
	c := newLRU(2)
	c.add("a")
	c.add("b")
	if !c.lookup("a") { // a is now the most recent, b the least
		t.Fatal("a is not cached")
	}
	c.add("c") // evicts b
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if got := c.lookup(key); got != want {
			t.Errorf("lookup(%s) = %v, want %v", key, got, want)
		}
	}
	if c.len() != 2 {
		t.Errorf("%d keys cached, want 2", c.len())
	}
}

// TestCacheModelHitsAndMisses: a key's first request misses and takes
// base+missExtra, its second hits and takes base; a key past the cache's size
// evicts the oldest; a miss whose caller gave up caches nothing; and the
// metrics count each lookup.
func TestCacheModelHitsAndMisses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Model, cfg.SlowProbability, cfg.CacheSize = Cache, 0, 2
	cfg.Base, cfg.MissExtra = Duration(5*time.Millisecond), Duration(200*time.Millisecond)
	ts, m, srv := newTestServer(t, cfg)
	get := func(key string) time.Duration {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/item", nil)
		req.Header.Set(CacheKeyHeader, key)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return time.Since(start)
	}
	if d := get("k1"); d < 205*time.Millisecond {
		t.Errorf("first request of k1 took %v: a miss takes at least 205ms", d)
	}
	if d := get("k1"); d >= 205*time.Millisecond {
		t.Errorf("second request of k1 took %v: a hit takes 5ms", d)
	}
	get("k2")
	get("k3") // evicts k1
	if d := get("k1"); d < 205*time.Millisecond {
		t.Errorf("k1 after two newer keys took %v: it should have been evicted", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := srv.Serve(ctx, time.Now(), "k4"); err == nil {
		t.Fatal("a 205ms miss finished within 50ms")
	}
	if srv.cache.lookup("k4") {
		t.Error("a miss whose caller gave up was cached")
	}
	hits, misses := testutil.ToFloat64(m.cache.WithLabelValues("hit")), testutil.ToFloat64(m.cache.WithLabelValues("miss"))
	if hits != 1 || misses != 4 {
		t.Errorf("hits %v, misses %v; want 1 and 4", hits, misses)
	}
}
