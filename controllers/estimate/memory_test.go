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
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// proxyRate is each proxy's requests per second in the memory tests, and
// hedgeShare the share of them hedged.
const (
	proxyRate  = 100
	hedgeShare = 0.05
	memBuckets = 49 // as xds.LatencyBucketsMs, with +Inf
)

// linearTick is every cluster's totals at at: two proxies, each serving
// proxyRate requests a second since t0, spread evenly over memBuckets bounds.
func linearTick(t0, at time.Time, clusters []string) envoyTick {
	secs := at.Sub(t0).Seconds()
	t := envoyTick{at: at, clusters: map[string]*clusterTotals{}}
	for _, c := range clusters {
		ct := &clusterTotals{series: map[uint64]*seriesTotals{}, scraped: at}
		for id := range uint64(2) {
			s := &seriesTotals{buckets: map[string]float64{}, counters: true,
				attempts: proxyRate * secs * (1 + hedgeShare), retries: proxyRate * secs * hedgeShare}
			for b := 1; b < memBuckets; b++ {
				s.buckets[strconv.Itoa(b)] = proxyRate * secs * float64(b) / memBuckets
			}
			s.buckets["+Inf"] = proxyRate * secs
			ct.series[id+1] = s
		}
		t.clusters[c] = ct
	}
	return t
}

// greedyAndDefaults are the policies of issue #23: one with window 1h and
// evaluationInterval 5s beside 50 with the defaults (window 2m, interval
// 30s), each on a Service of its own.
func greedyAndDefaults() (greedy *tailcutv1alpha1.HedgePolicy, all []tailcutv1alpha1.HedgePolicy, clusters []string) {
	for i := range 51 {
		p := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
			p.Name = fmt.Sprintf("svc-%d", i)
			p.Spec.TargetRef.Name = fmt.Sprintf("svc-%d", i)
		})
		if i == 0 {
			p.Spec.Delay.Auto.Window = dur(time.Hour)
			p.Spec.EvaluationInterval = dur(5 * time.Second)
		}
		all = append(all, *p)
		clusters = append(clusters, plan.ClusterName(p.Namespace, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port))
	}
	return &all[0], all, clusters
}

// fillMemory runs the sampler's scan and memory for 2.5 hours of ticks, as
// Tick does, with Prometheus answering linearTick; limit overrides
// memoryLimit when not zero.
func fillMemory(t *testing.T, est *Prometheus, limit int, all []tailcutv1alpha1.HedgePolicy, clusters []string, t0 time.Time) (time.Time, scanned) {
	t.Helper()
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) { return all, nil }, nil, logr.Discard())
	est.memory.limit = limit
	sc, err := sampler.scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for now.Sub(t0) < 150*time.Minute {
		now = now.Add(sc.tick)
		est.memory.add(linearTick(t0, now, clusters), sc.keep+2*sc.tick, sc.retain)
	}
	return now, sc
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSamplerMemoryIsBoundedPerPolicy: one policy with window 1h and
// evaluationInterval 5s made the sampler keep every cluster's totals for two
// hours at a 2.5s tick (issue #23: 2,880 ticks, about 300MB with 50 other
// policies, past the chart's 256Mi). Now each cluster is kept as its own
// policies need: the greedy policy's cluster for two hours, at its own tick;
// the 50 others for about four minutes at theirs.
func TestSamplerMemoryIsBoundedPerPolicy(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	greedy, all, clusters := greedyAndDefaults()
	before := heapInUse()
	est := newPrometheus(nil, time.Second)
	now, sc := fillMemory(t, est, 0, all, clusters, t0)
	grown := float64(heapInUse()) - float64(before)

	held := map[string]int{}
	for _, tk := range est.memory.ticks {
		for c := range tk.clusters {
			held[c]++
		}
	}
	if sc.tick != 2500*time.Millisecond {
		t.Fatalf("tick %s, want 2.5s (the greedy policy's interval, 5s, in two)", sc.tick)
	}
	// The greedy cluster: one entry per tick for 2h5s (keep: two windows
	// and two of its 2.5s ticks), and the one before that edge.
	if n := held[clusters[0]]; n != 2883 {
		t.Errorf("the greedy policy's cluster has %d entries, want 2,883 (2h5s at 2.5s, and one)", n)
	}
	// A default cluster: kept 4m20s (two 2m windows and two 10s ticks),
	// one entry per 10s, the one before the edge and the latest: 27 or 28.
	for _, c := range clusters[1:] {
		if n := held[c]; n < 27 || n > 28 {
			t.Errorf("%s has %d entries, want 27 or 28 (4m20s at 10s, and two)", c, n)
		}
	}
	// The stated bound: 8MiB for all 51 (docs/reliability.md). Before, every
	// cluster had 2,883 entries: 147,033.
	const bound = 8 << 20
	t.Logf("memory: %d entries, estimated %.1f MiB, heap grew %.1f MiB", total(held), float64(est.memory.bytes)/(1<<20), grown/(1<<20))
	if grown > bound || est.memory.bytes > bound {
		t.Errorf("the heap grew %.1f MiB (estimated %.1f MiB), want at most %d MiB", grown/(1<<20), float64(est.memory.bytes)/(1<<20), bound>>20)
	}
	if len(est.memory.coarse) != 0 {
		t.Errorf("memory thinned %v under its limit", est.memory.coarse)
	}
	// The greedy policy still reads its whole window, exactly.
	checkWindowReading(t, est, greedy, clusters[0], t0, now, 2500*time.Millisecond)
}

// TestSamplerMemoryLimit: when the clusters' needs exceed the limit, the
// cluster that needs the most entries is kept further apart, the others stay
// as their policies ask, the total stays within the limit, and the greedy
// policy's status says why its spans start late.
func TestSamplerMemoryLimit(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	greedy, all, clusters := greedyAndDefaults()
	est := newPrometheus(nil, time.Second)
	// Each entry is estimated at 1,360 bytes (entrySize: two proxies, 49
	// buckets). A default cluster needs 28 entries (38KB), 1.9MB for the 50;
	// the greedy one 2,884 (3.9MB). A 3MiB limit leaves it about 900.
	now, _ := fillMemory(t, est, 3<<20, all, clusters, t0)
	spacing, ok := est.memory.coarse[clusters[0]]
	if !ok || len(est.memory.coarse) != 1 {
		t.Fatalf("coarse %v, want the greedy policy's cluster alone", est.memory.coarse)
	}
	if est.memory.bytes > est.memory.limit {
		t.Errorf("kept %d bytes, over the limit %d", est.memory.bytes, est.memory.limit)
	}
	t.Logf("greedy cluster kept %s apart, %d bytes in all", spacing, est.memory.bytes)
	checkWindowReading(t, est, greedy, clusters[0], t0, now, spacing)

	res, err := est.Estimate(context.Background(), greedy, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Reason, "the sampler's memory is full") {
		t.Errorf("reason %q does not say the memory is full", res.Reason)
	}
}

// checkWindowReading reads the policy's window from memory: it must start
// within spacing after the window's start and count every request since,
// proxyRate per second per proxy.
func checkWindowReading(t *testing.T, est *Prometheus, p *tailcutv1alpha1.HedgePolicy, cluster string, t0, now time.Time, spacing time.Duration) {
	t.Helper()
	window := p.Spec.EffectiveAuto().Window.Duration
	a, sp, ok := est.memory.envoyAnswers(cluster, span{since: now.Add(-window), rng: window}, window, p.Spec.EffectiveEvaluationInterval())
	if !ok {
		t.Fatal("the window was not read")
	}
	late := sp.since.Sub(now.Add(-window))
	if late < 0 || late > spacing {
		t.Errorf("the window's reading starts %s late, want at most %s", late, spacing)
	}
	want := 2 * proxyRate * now.Sub(sp.since).Seconds()
	if got := bucketsOf(a.buckets)["+Inf"]; got < want-1e-6 || got > want+1e-6 {
		t.Errorf("read %v requests since %s, want %v", got, sp.since, want)
	}
}

func total(held map[string]int) int {
	n := 0
	for _, v := range held {
		n += v
	}
	return n
}

// TestThinnedMemoryKeepsTheEntryBeforeAReset: a cluster kept 10s apart on a
// 2.5s tick drops entries, but not the one before a proxy's restart: a
// reset's increase is the counter's new value, and without the entry before
// it what the proxy counted since the entry before that would be lost.
func TestThinnedMemoryKeepsTheEntryBeforeAReset(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const c = "tailcut_shop_cart_8080"
	m := &memory{}
	retain := map[string]retention{c: {keep: time.Hour, spacing: 10 * time.Second}}
	// 40 requests a tick; the proxy restarts after tick 9 and counts 15
	// before tick 10 is read.
	count, served := 0.0, 0.0
	for i := range 24 {
		switch i {
		case 0:
		case 10:
			count = 15
			served += 15
		default:
			count += 40
			served += 40
		}
		m.add(tickAt(t0.Add(time.Duration(i)*2500*time.Millisecond), map[string][4]float64{c: {count, count, 0, count}}), 2*time.Hour, retain)
	}
	kept := 0
	for _, tk := range m.ticks {
		if tk.clusters[c] != nil {
			kept++
		}
	}
	if kept >= 24 {
		t.Fatalf("kept %d entries of 24: nothing was thinned", kept)
	}
	a, _, ok := m.envoyAnswers(c, span{since: t0, rng: time.Minute}, 10*time.Minute, 10*time.Second)
	if !ok {
		t.Fatal("nothing read")
	}
	if got := vectorValue(t, a.attempts); got != served {
		t.Errorf("read %v requests from %d entries, want the %v served", got, kept, served)
	}
}

// The span's histogram comes cut at every good tick, so that the budget
// guard can tell a burst in one tick from a breach across the span; a tick
// whose queries failed joins its two neighbours' part, and the parts add up
// to the span.
func TestSpanPartsFollowTheTicks(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := "tailcut_shop_web_80"
	m := newMemory()
	for i := range 5 {
		tk := linearTick(t0, t0.Add(time.Duration(i)*2500*time.Millisecond), []string{c})
		if i == 2 {
			tk = envoyTick{at: tk.at, err: fmt.Errorf("query timed out")}
		}
		m.add(tk, time.Hour, nil)
	}
	a, _, ok := m.envoyAnswers(c, span{since: t0, rng: 10 * time.Second}, 30*time.Second, 5*time.Second)
	if !ok {
		t.Fatal("nothing read")
	}
	// Two proxies at proxyRate: 500 requests in 2.5 s.
	var got []float64
	for _, part := range a.parts {
		got = append(got, bucketsOf(part)["+Inf"])
	}
	if want := []float64{500, 1000, 500}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parts of %v requests, want %v: ticks 0-1, 1-3 (tick 2 failed), 3-4", got, want)
	}
	if whole := bucketsOf(a.buckets)["+Inf"]; whole != 2000 {
		t.Errorf("the span holds %v requests, want 2000", whole)
	}
}
