//go:build localstack

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
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/test/dashboards"
	"github.com/tailcut/tailcut/test/envtestutil"
)

// freePorts picks loopback ports nobody listens on, so the e2e runs beside a demo.
func freePorts(t *testing.T) Ports {
	t.Helper()
	var ls []net.Listener
	next := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port
	}
	p := Ports{Listener: next(), Admin: next(), XDS: next(), Prometheus: next(), Metrics: next(), Probe: next(),
		Workloads: [3]int{next(), next(), next()}}
	for _, l := range ls {
		l.Close()
	}
	return p
}

func startStack(t *testing.T, scenario string) (*Stack, context.Context) {
	t.Helper()
	sc, err := LookupScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	dir, err := os.MkdirTemp("", "tailcut-e2e-"+scenario+"-")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Options{Dir: dir, Ports: freePorts(t), Scenario: sc, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("logs kept in %s", dir)
		}
	})
	return s, ctx
}

// TestHedgingShortensTheTail runs about 10k requests per arm through the bimodal
// workload (15ms, 5% +100ms) and checks the claims tailcut makes, with margins.
func TestHedgingShortensTheTail(t *testing.T) {
	s, ctx := startStack(t, "bimodal")
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitReady(ctx, 150, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	// Closed loop: while k6 runs with hedging on, record the delay at every
	// evaluation interval. Hedging censors the hedged cluster's latency; a delay
	// derived from it would drift toward the min clamp (5ms), one stuck on the p95
	// step would sit at the slow mode (~115ms).
	series := s.recordDelays(ctx, 5*time.Second)
	r, _, err := s.RunAB(ctx, K6Options{Rate: 170, Duration: "60s", MaxP99Ratio: 0.5, PostRate: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	delays := series()
	t.Logf("closed-loop delay series (every 5s): %v", delays)
	if len(delays) < 8 {
		t.Errorf("only %d delay samples over the run", len(delays))
	}
	for _, d := range delays {
		if d < 15*time.Millisecond || d > 60*time.Millisecond {
			t.Errorf("delay %v left [15ms, 60ms]: above the fast mode, well below the slow mode", d)
		}
	}
	logTable(t, r)

	bypass, hedged := r.Arms["bypass"], r.Arms["hedged"]
	if bypass.Count < 9000 || hedged.Count < 9000 {
		t.Errorf("only %v bypass and %v hedged samples; p99 needs about 10k per arm", bypass.Count, hedged.Count)
	}
	if hedged.P99 > 0.5*bypass.P99 {
		t.Errorf("hedged p99 %.1fms > 0.5 x bypass p99 %.1fms", hedged.P99, bypass.P99)
	}
	if hedged.P50-bypass.P50 > 3 {
		t.Errorf("hedging added %.1fms at p50 (more than 3ms)", hedged.P50-bypass.P50)
	}
	if budget := float64(r.BudgetPct); r.ExtraLoadPct > budget+2 || r.ExtraLoadPct <= 0 {
		t.Errorf("extra load %.2f%%, want in (0, budget %v%% + 2]", r.ExtraLoadPct, budget)
	}
	if bypass.ErrorRate != 0 || hedged.ErrorRate != 0 {
		t.Errorf("errors: bypass %v hedged %v", bypass.ErrorRate, hedged.ErrorRate)
	}
	if r.DroppedIterations != 0 {
		t.Errorf("%v dropped iterations: the run is invalid", r.DroppedIterations)
	}
	if r.PostsSent < 500 || r.PostSideEffects != r.PostsSent {
		t.Errorf("%v POSTs sent, %v reached the backends: a POST was duplicated or lost", r.PostsSent, r.PostSideEffects)
	}
	checkDashboards(ctx, t, s)
}

// checkDashboards runs every query of the chart's Grafana dashboards against the
// stack's Prometheus right after traffic flowed, and fails on a query that
// returns no data. Only NACKs and estimator errors may be empty in a healthy run.
func checkDashboards(ctx context.Context, t *testing.T, s *Stack) {
	t.Helper()
	c, err := promapi.NewClient(promapi.Config{Address: "http://" + addr(s.opts.Ports.Prometheus)})
	if err != nil {
		t.Fatal(err)
	}
	prom := promv1.NewAPI(c)
	values := map[string]string{
		"__rate_interval": "1m", "__interval": "30s", "__range": "1h", "datasource": "prometheus",
		"policy": Namespace + "/" + PolicyName, "cluster": fmt.Sprintf("tailcut_%s_%s_%d", Namespace, Service, Port),
		"quantile": "0.95", "budget": "0.05", "namespace": Namespace,
	}
	dir := filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards")
	ran, failures, err := dashboards.CheckQueries(ctx, prom, dir, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if ran == 0 {
		t.Fatal("the chart's dashboards have no queries")
	}
	t.Logf("ran %d dashboard queries against Prometheus", ran)
}

// TestSaturationBacksOff runs the saturation workload, where extra requests only
// add queueing, and checks that tailcut reduced or paused hedging and that the
// hedged tail is not much worse than the unhedged one.
func TestSaturationBacksOff(t *testing.T) {
	s, ctx := startStack(t, "saturation")
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first, err := s.WaitReady(ctx, 150, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, policy, err := s.RunAB(ctx, K6Options{Rate: 150, Duration: "60s", MaxP99Ratio: 1.1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	logTable(t, r)
	t.Logf("delay before the run: %v (%s); after: %v (%s): %s", first.Status.EffectiveDelay, first.Status.DelaySource,
		policy.Status.EffectiveDelay, policy.Status.DelaySource, policy.Status.DelayReason)

	backedOff := policy.Status.EffectiveDelay == nil ||
		(first.Status.EffectiveDelay != nil && policy.Status.EffectiveDelay.Duration > first.Status.EffectiveDelay.Duration)
	if c := meta.FindStatusCondition(policy.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived); c != nil && c.Reason == tailcutv1alpha1.ReasonHedgingHurts {
		backedOff = true
	}
	if !backedOff {
		t.Errorf("tailcut neither raised the delay nor paused hedging under saturation: %s", policy.Status.DelayReason)
	}
	if r.Arms["hedged"].P99 > 1.1*r.Arms["bypass"].P99 {
		t.Errorf("hedged p99 %.1fms is more than 10%% worse than bypass p99 %.1fms", r.Arms["hedged"].P99, r.Arms["bypass"].P99)
	}
}

func logTable(t *testing.T, r Report) {
	t.Helper()
	var table strings.Builder
	r.PrintTable(&table)
	t.Log(table.String())
}

// recordDelays samples the policy's effective delay every interval until the
// returned function is called, which returns the samples (0 = hedging off).
func (s *Stack) recordDelays(ctx context.Context, interval time.Duration) func() []time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	var delays []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			if p, err := s.Policy(ctx); err == nil {
				var d time.Duration
				if p.Status.EffectiveDelay != nil {
					d = p.Status.EffectiveDelay.Duration
				}
				delays = append(delays, d)
			}
		}
	}()
	return func() []time.Duration {
		cancel()
		<-done
		return delays
	}
}
