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
	"errors"
	"github.com/prometheus/prometheus/promql/parser"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/model"
	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// tickAt builds one tick of one proxy: cluster -> (count at le=16, count at
// +Inf, retries, attempts).
func tickAt(at time.Time, clusters map[string][4]float64) envoyTick {
	t := envoyTick{at: at, clusters: map[string]*clusterTotals{}}
	for name, v := range clusters {
		t.clusters[name] = &clusterTotals{series: map[uint64]*seriesTotals{1: {
			buckets: map[string]float64{"16": v[0], "+Inf": v[1]}, retries: v[2], attempts: v[3], counters: true,
		}}}
	}
	return t
}

func vectorValue(t *testing.T, a answer) float64 {
	t.Helper()
	vec, ok := a.v.(model.Vector)
	if a.err != nil || !ok || len(vec) != 1 {
		t.Fatalf("answer %+v, want one value", a)
	}
	return float64(vec[0].Value)
}

func bucketsOf(a answer) map[string]float64 {
	out := map[string]float64{}
	vec, _ := a.v.(model.Vector)
	for _, s := range vec {
		out[string(s.Metric[model.BucketLabel])] = float64(s.Value)
	}
	return out
}

// TestSamplerIncreases works the sampler's arithmetic out by hand: a span's
// reading is the difference of its ticks, a reset counts its later value, a
// failed tick in between is skipped, and a cluster that appears counts from
// its first sample (TestSamplerCountsEachProxy has several proxies).
func TestSamplerIncreases(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := &memory{}
	const c, fresh = "tailcut_shop_cart_8080", "tailcut_shop_new_80"
	ticks := []envoyTick{
		tickAt(t0, map[string][4]float64{c: {100, 110, 5, 115}}),
		tickAt(t0.Add(5*time.Second), map[string][4]float64{c: {200, 220, 10, 230}}),
		{at: t0.Add(10 * time.Second), err: errors.New("Prometheus did not answer")},
		// The proxy restarted: its counts fell.
		tickAt(t0.Add(15*time.Second), map[string][4]float64{c: {50, 60, 2, 62}, fresh: {10, 10, 0, 10}}),
		tickAt(t0.Add(20*time.Second), map[string][4]float64{c: {150, 165, 7, 172}, fresh: {30, 35, 1, 36}}),
	}
	for _, tk := range ticks {
		m.add(tk, time.Hour, nil)
	}
	sp := span{since: t0, rng: 20 * time.Second}
	a, got, ok := m.envoyAnswers(c, sp, 30*time.Second, 5*time.Second)
	if !ok || !got.since.Equal(t0) {
		t.Fatalf("ok %v, span from %s: want the span read from the tick at its start, %s", ok, got.since, t0)
	}
	// le=16: 100->200 (+100), reset to 50 (+50), 50->150 (+100): 250.
	// +Inf: +110, +60, +105: 275. Retries: +5, +2, +5: 12. Attempts: +115, +62, +110: 287.
	if b := bucketsOf(a.buckets); b["16"] != 250 || b["+Inf"] != 275 {
		t.Errorf("buckets %v, want le=16 250, +Inf 275", b)
	}
	if r, n := vectorValue(t, a.retries), vectorValue(t, a.attempts); r != 12 || n != 287 {
		t.Errorf("retries %v attempts %v, want 12 and 287", r, n)
	}
	// The last interval: 150-50 at le=16, 165-60 at +Inf.
	if b := bucketsOf(a.last); b["16"] != 100 || b["+Inf"] != 105 {
		t.Errorf("last interval %v, want le=16 100, +Inf 105", b)
	}
	// A cluster that appeared after the span began counts from its first
	// sample: before it, its proxy may have counted a lifetime.
	a, _, _ = m.envoyAnswers(fresh, sp, 30*time.Second, 5*time.Second)
	if b := bucketsOf(a.buckets); b["16"] != 20 || b["+Inf"] != 25 {
		t.Errorf("new cluster %v, want le=16 20, +Inf 25", b)
	}
	// A cluster first seen at the last tick has nothing measured yet.
	late := tickAt(t0.Add(20*time.Second), map[string][4]float64{"tailcut_shop_late_80": {5, 5, 0, 5}})
	m.intern(&late)
	m.ticks[len(m.ticks)-1].clusters["tailcut_shop_late_80"] = late.clusters["tailcut_shop_late_80"]
	if _, _, ok := m.envoyAnswers("tailcut_shop_late_80", sp, 30*time.Second, 5*time.Second); ok {
		t.Error("a cluster with one sample read something")
	}
	// A cluster nobody scrapes has no series: NoData, not zero traffic.
	a, _, _ = m.envoyAnswers("tailcut_shop_gone_80", sp, 30*time.Second, 5*time.Second)
	if vec, ok := a.buckets.v.(model.Vector); !ok || len(vec) != 0 {
		t.Errorf("unknown cluster: %+v, want an empty vector", a.buckets)
	}
	// A span that starts after the next-to-last tick has nothing to read yet.
	if _, _, ok := m.envoyAnswers(c, span{since: t0.Add(16 * time.Second)}, 30*time.Second, 5*time.Second); ok {
		t.Error("a span after the last tick read something")
	}
	// When the last tick failed, that failure is the answer.
	m.add(envoyTick{at: t0.Add(25 * time.Second), err: errors.New("timeout")}, time.Hour, nil)
	a, _, ok = m.envoyAnswers(c, sp, 30*time.Second, 5*time.Second)
	if !ok || a.buckets.err == nil {
		t.Errorf("last tick failed: %+v, want its error", a.buckets)
	}
}

// TestSamplerSpanStartsAfterItsStart: a span starts at the first tick whose
// counters Prometheus scraped at or after the span's start. A tick taken after
// a delay change can still hold a scrape from before it; counting those
// requests, hedged at the old delay, against the new one made the budget
// guard see 30% hedged where 5% were (the local stack's shift, 28.1 -> 50.6ms).
func TestSamplerSpanStartsAfterItsStart(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const c = "tailcut_shop_cart_8080"
	m := &memory{}
	scraped := func(tk envoyTick, at time.Time) envoyTick {
		tk.clusters[c].scraped = at
		return tk
	}
	// At the old delay every request was hedged (retries = attempts); from
	// the change at t0+1s, none were.
	m.add(scraped(tickAt(t0, map[string][4]float64{c: {0, 100, 100, 200}}), t0.Add(-time.Second)), time.Hour, nil)
	m.add(scraped(tickAt(t0.Add(2*time.Second), map[string][4]float64{c: {0, 100, 100, 200}}), t0.Add(500*time.Millisecond)), time.Hour, nil)
	m.add(scraped(tickAt(t0.Add(4*time.Second), map[string][4]float64{c: {0, 400, 130, 500}}), t0.Add(3*time.Second)), time.Hour, nil)
	sp := span{since: t0.Add(time.Second), rng: 3 * time.Second}
	if _, _, ok := m.envoyAnswers(c, sp, 30*time.Second, 2*time.Second); ok {
		t.Fatal("one tick scraped after the change is not a span yet")
	}
	m.add(scraped(tickAt(t0.Add(6*time.Second), map[string][4]float64{c: {0, 700, 145, 800}}), t0.Add(5*time.Second)), time.Hour, nil)
	a, got, ok := m.envoyAnswers(c, sp, 30*time.Second, 2*time.Second)
	if !ok || !got.since.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("ok %v, span from %s: want the tick at t0+4s, the first scraped after the change", ok, got.since)
	}
	// From t0+4s: 15 retries of 300 requests, 5%; from the tick at t0+2s it
	// would have been 45 of 600.
	if r, n := vectorValue(t, a.retries), vectorValue(t, a.attempts); r != 15 || n != 300 {
		t.Errorf("retries %v of %v, want 15 of 300", r, n)
	}
}

// TestSamplerForgets keeps a tick older than keep, for the span that starts at
// the edge, and no more.
func TestSamplerForgets(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := &memory{}
	for i := range 10 {
		m.add(tickAt(t0.Add(time.Duration(i)*10*time.Second), nil), 30*time.Second, nil)
	}
	if len(m.ticks) != 4 || !m.ticks[0].at.Equal(t0.Add(60*time.Second)) {
		t.Errorf("kept %d ticks from %s, want 4 from %s", len(m.ticks), m.ticks[0].at, t0.Add(60*time.Second))
	}
}

// TestSamplerQueries: the sampler's six queries parse, read every hedged
// cluster, and can never read a bypass cluster or the xDS cluster.
func TestSamplerQueries(t *testing.T) {
	for _, q := range []string{sampleBuckets, sampleCounters, sampleScraped} {
		if err := checkPromQL(q, true, nil); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	// The per-endpoint query reads every scrape in its window: a range vector.
	if expr, err := promQLParser.ParseExpr(sampleEndpoints); err != nil || expr.Type() != parser.ValueTypeMatrix {
		t.Errorf("%s: %v, type %v, want a range vector", sampleEndpoints, err, expr)
	}
	re := regexp.MustCompile("^(?:" + hedgedClusters + ")$")
	for name, want := range map[string]bool{
		"tailcut_shop_cart_8080": true, "tailcut_a-b_c-d_1": true,
		"tailcut_shop_cart_8080_bypass": false, "tailcut_xds": false, "other_shop_cart_80": false,
	} {
		if re.MatchString(name) != want {
			t.Errorf("%s matched %v, want %v", name, !want, want)
		}
	}
}

// TestSamplerSamplesANewPolicyAtItsPace: with no policies the sampler's tick
// is its longest (30 s). A policy with a 5 s interval that appears then was
// first read up to 30 s later, so its first delay came after 35 s on the local
// stack. It must be read within a short tick.
func TestSamplerSamplesANewPolicyAtItsPace(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.03))
	est := newTestEstimator(t, f, time.Second)
	var mu sync.Mutex
	var policies []tailcutv1alpha1.HedgePolicy
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(policies), nil
	}, nil, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sampler.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	time.Sleep(500 * time.Millisecond) // the first tick, with no policies
	mu.Lock()
	policies = []tailcutv1alpha1.HedgePolicy{*testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.EvaluationInterval = dur(5 * time.Second)
	})}
	mu.Unlock()
	added := time.Now()
	for len(f.queries()) == 0 {
		if time.Since(added) > 2*minTick {
			t.Fatalf("a policy with a 5s interval was not read %s after it appeared", time.Since(added).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("first query %s after the policy appeared", time.Since(added).Round(100*time.Millisecond))
}

// TestTickFor: the tick divides the interval into three where it can, stays
// within [2s, 30s], and evaluations then come exactly once per interval.
func TestTickFor(t *testing.T) {
	for interval, want := range map[time.Duration]time.Duration{
		5 * time.Second:  2500 * time.Millisecond, // three would be 1.67s
		6 * time.Second:  2 * time.Second,
		30 * time.Second: 10 * time.Second,
		2 * time.Minute:  30 * time.Second, // four ticks
		time.Hour:        30 * time.Second,
	} {
		if got := tickFor(interval); got != want {
			t.Errorf("tickFor(%s) = %s, want %s", interval, got, want)
		}
	}
}
