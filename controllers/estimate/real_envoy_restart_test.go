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
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/model"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// realEnvoyBootstrap is a static Envoy that hedges every request to the
// backend after 20ms (with tailcut's default retryOn), on a cluster named
// like a hedged cluster, and flushes its stats when scraped (as tailcut's
// bootstrap does).
const realEnvoyBootstrap = `
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: %[1]d}}
stats_flush_on_admin: true
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 127.0.0.1, port_value: %[2]d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: %[3]s
                  timeout: 5s
                  retry_policy: {retry_on: "reset,connect-failure", num_retries: 1, per_try_timeout: 0.020s}
                  hedge_policy: {hedge_on_per_try_timeout: true}
  clusters:
  - name: %[3]s
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: %[3]s
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %[4]d}}}
`

// realEnvoy is one Envoy process, restartable on the same ports.
type realEnvoy struct {
	t               *testing.T
	bin, config     string
	admin, listener int
	stop            func()
}

var realEnvoys atomic.Int32

func (e *realEnvoy) start() {
	t := e.t
	t.Helper()
	baseID := os.Getpid()*10 + int(realEnvoys.Add(1))
	p := harness.RunProcess(t, "envoy", t.TempDir(), nil, e.bin, "-c", e.config, "--base-id", strconv.Itoa(baseID),
		"--concurrency", "1", "--log-level", "warn", "--drain-time-s", "0")
	e.stop = func() { p.Stop(10 * time.Second) }
	harness.Eventually(t, 20*time.Second, "envoy ready", func() (bool, string) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("envoy exited (%v):\n%s", err, p.Tail())
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", e.admin))
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// send sends n requests through the Envoy, one at a time; the backend holds
// one in every 60ms (both its attempts), so Envoy hedges it after 20ms, and
// answers the others in 2ms.
func (e *realEnvoy) send(n, every int) {
	e.t.Helper()
	for i := range n {
		path := "/"
		if i%every == 0 {
			path = "/?slow=1"
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", e.listener, path))
		if err != nil {
			e.t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			e.t.Fatalf("request %d through envoy: %s", i, resp.Status)
		}
	}
}

// TestRealEnvoysProxyRestart: two real Envoys of one hedged cluster, scraped
// by a real Prometheus as two targets of one job, as the chart runs them.
// Each serves a lifetime of 100 requests, 25 hedged; then 100 more, 10
// hedged; then one restarts on the same ports (its counters start again from
// 0, and Prometheus misses its scrapes while it is down), and each serves 100
// more, 10 hedged. The reading over the three ticks counts the 400 requests
// and 40 hedges served since the first, not the lifetime that summed series
// read when the sum fell.
func TestRealEnvoysProxyRestart(t *testing.T) {
	envoyBin := harness.EnvoyBin(t)
	harness.Binary(t, "PROMETHEUS_BIN", "prometheus") // StartPrometheus runs it: fail before any Envoy starts
	// The same run without the restart is the control: the reading, the
	// delay and the hedge rate decided from it must be the same.
	results := map[bool]restartResult{}
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			results[restart] = runRealEnvoys(t, envoyBin, restart)
		})
	}
	t.Logf("without the restart: %+v; with it: %+v", results[false], results[true])
	if results[false] != results[true] {
		t.Errorf("the restart changed what was decided: %+v, without it %+v", results[true], results[false])
	}
}

// restartResult is what one run read and decided.
type restartResult struct {
	requests, hedged, samples float64
	delay                     time.Duration
	hedgePercent              float64
}

func runRealEnvoys(t *testing.T, envoyBin string, restart bool) restartResult {
	policy := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay.Auto.Window = dur(5 * time.Minute)
		p.Spec.EvaluationInterval = dur(5 * time.Second)
	})
	cluster := plan.ClusterName(policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			time.Sleep(60 * time.Millisecond)
		} else {
			// Inside one bucket of Envoy's default histogram (1-5ms) on any
			// machine. Answered at once (0.3ms) they straddled the 0.5ms
			// bucket: on a loaded machine enough of them passed it for
			// twice the median to count a sixth of the requests slow, and
			// one run read TailOutOfReach (no delay) where the other read
			// 121ms, restart or not.
			time.Sleep(2 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	_, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	backendPort, _ := strconv.Atoi(port)

	envoys := make([]*realEnvoy, 2)
	var targets []string
	for i := range envoys {
		e := &realEnvoy{t: t, bin: envoyBin, admin: harness.Port(t), listener: harness.Port(t)}
		e.config = filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(e.config, fmt.Appendf(nil, realEnvoyBootstrap, e.admin, e.listener, cluster, backendPort), 0o600); err != nil {
			t.Fatal(err)
		}
		e.start()
		envoys[i] = e
		targets = append(targets, fmt.Sprintf("127.0.0.1:%d", e.admin))
	}
	a, b := envoys[0], envoys[1]
	promURL := harness.StartPrometheus(t, "/stats/prometheus", targets...)
	est, err := NewPrometheus(PrometheusOptions{Address: promURL})
	if err != nil {
		t.Fatal(err)
	}
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*policy.DeepCopy()}, nil
	}, nil, logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// tick waits until Prometheus holds each Envoy's requests (counter and,
	// a flush later, histogram) and hedges, then the sampler reads them.
	type shown struct{ requests, retries float64 }
	tick := func(step string, want map[*realEnvoy]shown) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := map[string]map[string]float64{}
			for _, q := range []string{attemptMetric, retryMetric, envoyLatencyMetric + `_count`} {
				q += fmt.Sprintf("{envoy_cluster_name=%q}", cluster)
				v, err := est.query(ctx, q, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				vec, _ := v.(model.Vector)
				for _, s := range vec {
					in := string(s.Metric["instance"])
					if got[in] == nil {
						got[in] = map[string]float64{}
					}
					got[in][string(s.Metric[model.MetricNameLabel])] = float64(s.Value)
				}
			}
			done := true
			for e, w := range want {
				g := got[fmt.Sprintf("127.0.0.1:%d", e.admin)]
				done = done && g[attemptMetric] == w.requests+w.retries && g[retryMetric] == w.retries && g[envoyLatencyMetric+"_count"] == w.requests
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Prometheus shows %v, want %v", step, got, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
		sampler.Tick(ctx, time.Now())
	}
	a.send(100, 4)
	b.send(100, 4)
	tick("lifetime", map[*realEnvoy]shown{a: {100, 25}, b: {100, 25}})
	a.send(100, 10)
	b.send(100, 10)
	tick("both served", map[*realEnvoy]shown{a: {200, 35}, b: {200, 35}})
	if restart {
		a.stop()
		a.start()
		a.send(100, 10)
		b.send(100, 10)
		tick("a restarted", map[*realEnvoy]shown{a: {100, 10}, b: {300, 45}})
	} else {
		a.send(100, 10)
		b.send(100, 10)
		tick("no restart", map[*realEnvoy]shown{a: {300, 45}, b: {300, 45}})
	}

	auto := policy.Spec.EffectiveAuto()
	sp := readSpan(policy, &auto, time.Now())
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
	// a: 100, then 100 after its restart; b: 100 and 100. 10 hedged in each
	// hundred.
	t.Logf("read %.0f requests (%.0f in the histogram), %.0f hedged: %.2f%%", r.hedge.requests, r.samples, r.hedge.retries, r.hedge.percent())
	if r.hedge.requests != 400 || r.hedge.retries != 40 || r.samples != 400 {
		t.Errorf("read %.0f requests (%.0f in the histogram), %.0f hedged; want 400 (400), 40 hedged", r.hedge.requests, r.samples, r.hedge.retries)
	}
	res := decide(policy, &auto, sp, r, time.Now())
	out := restartResult{requests: r.hedge.requests, hedged: r.hedge.retries, samples: r.samples, delay: res.Delay}
	if res.HedgeRate != nil {
		out.hedgePercent = res.HedgeRate.Percent
	}
	return out
}
