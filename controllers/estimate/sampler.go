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
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// The sampler reads Prometheus on its own schedule, so that no reconcile ever
// waits for it: a slow or hung Prometheus delays delay changes, never endpoint
// or route updates.
//
// For the Envoy source, one tick sends three queries whatever the number of
// policies: the cumulative latency histogram and the hedge and request
// counters of every hedged cluster (hedgedClusters), summed over the proxies,
// and when Prometheus scraped those counters. The sampler keeps these totals
// for two windows. A policy's reading over any span is the difference of two
// ticks, computed when its reconcile asks for it (Estimate), from memory. A
// span starts at the first tick whose counters were scraped after the span
// began: a tick taken after a delay change may still hold a scrape from before
// it, and counting that scrape's requests against the new delay (hedged at
// the old one) would misjudge it. A counter that went down between two ticks
// was reset (a proxy restarted): its later value is the increase, as
// Prometheus' increase() counts it.
//
// Workload and Custom sources have a query of their own per policy: the
// sampler sends it when the policy is due, for the span the policy's status
// asks for, and keeps the answers for its reconcile.
//
// The tick divides the shortest evaluationInterval among Auto policies into
// ticksPerEval (fewer when a tick would be shorter than minTick, more when
// longer than maxTick), so that a delay change has two ticks of its own by the
// next evaluation: at most nine queries per interval. After each tick the
// sampler enqueues the policies whose interval has passed, so they are
// evaluated with what it just read.
const (
	minTick      = 2 * time.Second
	maxTick      = 30 * time.Second
	ticksPerEval = 3
	// ownConcurrency bounds the per-policy queries in flight.
	ownConcurrency = 8
)

// hedgedClusters matches tailcut's hedged clusters (plan.ClusterName) and
// nothing else: not the bypass clusters, not the xDS cluster.
const hedgedClusters = `tailcut_.+_[0-9]+`

// The sampler's queries, one per tick for every policy of source Envoy.
var (
	sampleBuckets  = `sum by (envoy_cluster_name, le) (envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"` + hedgedClusters + `"})`
	sampleCounters = `sum by (__name__, envoy_cluster_name) ({__name__=~"` + retryMetric + `|` + attemptMetric + `",envoy_cluster_name=~"` + hedgedClusters + `"})`
	// sampleScraped is when the oldest of a cluster's request counters (one
	// per proxy) was scraped, in seconds since the epoch.
	sampleScraped = `min by (envoy_cluster_name) (timestamp(` + attemptMetric + `{envoy_cluster_name=~"` + hedgedClusters + `"}))`
)

const (
	retryMetric   = "envoy_cluster_upstream_rq_retry"
	attemptMetric = "envoy_cluster_upstream_rq_total"
)

// PolicyLister lists every HedgePolicy (from the manager's cache).
type PolicyLister func(ctx context.Context) ([]tailcutv1alpha1.HedgePolicy, error)

// Sampler is the manager.Runnable that reads Prometheus for an estimator. It
// runs on the leader, where policies are evaluated.
type Sampler struct {
	p      *Prometheus
	list   PolicyLister
	notify chan<- event.GenericEvent
	log    logr.Logger

	notified map[types.NamespacedName]time.Time
	unread   map[types.NamespacedName]bool // the last due evaluation found nothing to read
}

var (
	_ manager.Runnable               = (*Sampler)(nil)
	_ manager.LeaderElectionRunnable = (*Sampler)(nil)
)

// Sampler attaches a sampler to the estimator: from then on Estimate reads
// only what the sampler read and sends no query itself. notify, when not nil,
// receives the policies to evaluate after each tick.
func (p *Prometheus) Sampler(list PolicyLister, notify chan<- event.GenericEvent, log logr.Logger) *Sampler {
	p.memory = &memory{own: map[types.NamespacedName]ownReading{}}
	return &Sampler{p: p, list: list, notify: notify, log: log, notified: map[types.NamespacedName]time.Time{}, unread: map[types.NamespacedName]bool{}}
}

// NeedLeaderElection is true: only the leader evaluates policies.
func (s *Sampler) NeedLeaderElection() bool { return true }

// Start ticks until ctx ends. It looks at the policies at least every
// minTick, so a new policy with a short interval is sampled at its pace at
// once, not after the long tick of the policies before it.
func (s *Sampler) Start(ctx context.Context) error {
	var last time.Time
	for {
		wait := minTick
		sc, err := s.scan(ctx)
		if err != nil || last.IsZero() || time.Since(last) >= sc.tick {
			last = time.Now()
			s.Tick(ctx, last)
		}
		if err == nil {
			wait = min(wait, sc.tick-time.Since(last))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wait, 10*time.Millisecond)):
		}
	}
}

// tickFor is the tick for the shortest evaluation interval: it divides the
// interval, so that evaluations (after ticks) come once per interval.
func tickFor(shortest time.Duration) time.Duration {
	n := max(ticksPerEval, int((shortest+maxTick-1)/maxTick))
	for n > 1 && shortest/time.Duration(n) < minTick {
		n--
	}
	return shortest / time.Duration(n)
}

// scanned is what the sampler reads, from the policies it reads for.
type scanned struct {
	auto  []*tailcutv1alpha1.HedgePolicy
	tick  time.Duration // see tickFor
	keep  time.Duration // how long readings are kept: two of the longest windows
	envoy bool          // a policy reads the Envoy source
}

func (s *Sampler) scan(ctx context.Context) (scanned, error) {
	list, err := s.list(ctx)
	if err != nil {
		return scanned{}, err
	}
	sc := scanned{tick: maxTick, keep: 2 * time.Minute}
	for i := range list {
		p := &list[i]
		if !p.DeletionTimestamp.IsZero() || p.Spec.Suspend || p.Spec.EffectiveDelayMode() != tailcutv1alpha1.DelayModeAuto {
			continue
		}
		sc.auto = append(sc.auto, p)
		a := p.Spec.EffectiveAuto()
		sc.tick = min(sc.tick, p.Spec.EffectiveEvaluationInterval())
		sc.keep = max(sc.keep, 2*a.Window.Duration)
		sc.envoy = sc.envoy || sampledByCluster(p, &a)
	}
	sc.tick = tickFor(sc.tick)
	return sc, nil
}

// Tick reads Prometheus once, at now, and returns the time until the next tick.
func (s *Sampler) Tick(ctx context.Context, now time.Time) time.Duration {
	sc, err := s.scan(ctx)
	if err != nil {
		s.log.Error(err, "listing HedgePolicies; sampling again at the next tick")
		return minTick
	}
	if sc.envoy {
		s.p.memory.add(s.readEnvoy(ctx, now), sc.keep+2*sc.tick)
	}
	due := s.due(sc.auto, now, sc.tick)
	s.readOwn(ctx, due, now)
	s.enqueue(ctx, due)
	return sc.tick
}

// readEnvoy reads every hedged cluster's totals.
func (s *Sampler) readEnvoy(ctx context.Context, now time.Time) envoyTick {
	t := envoyTick{at: now, clusters: map[string]*clusterTotals{}}
	var buckets, counters, scraped answer
	var wg sync.WaitGroup
	for q, dst := range map[string]*answer{sampleBuckets: &buckets, sampleCounters: &counters, sampleScraped: &scraped} {
		wg.Go(func() {
			v, err := s.p.query(ctx, q, now)
			*dst = answer{v, err}
		})
	}
	wg.Wait()
	for _, a := range []answer{buckets, counters, scraped} {
		if a.err != nil {
			t.err = a.err
			return t
		}
	}
	totals := func(v model.Value, fill func(*clusterTotals, *model.Sample)) {
		vec, _ := v.(model.Vector)
		for _, smp := range vec {
			name := string(smp.Metric[envoyClusterLabel])
			c := t.clusters[name]
			if c == nil {
				c = &clusterTotals{buckets: map[string]float64{}}
				t.clusters[name] = c
			}
			fill(c, smp)
		}
	}
	totals(buckets.v, func(c *clusterTotals, smp *model.Sample) {
		c.buckets[string(smp.Metric[model.BucketLabel])] = float64(smp.Value)
	})
	totals(counters.v, func(c *clusterTotals, smp *model.Sample) {
		switch smp.Metric[model.MetricNameLabel] {
		case retryMetric:
			c.retries, c.counters = float64(smp.Value), true
		case attemptMetric:
			c.attempts, c.counters = float64(smp.Value), true
		}
	})
	totals(scraped.v, func(c *clusterTotals, smp *model.Sample) {
		c.scraped = time.UnixMilli(int64(float64(smp.Value) * 1000))
	})
	return t
}

// readOwn sends the per-policy queries of Workload and Custom policies.
func (s *Sampler) readOwn(ctx context.Context, auto []*tailcutv1alpha1.HedgePolicy, now time.Time) {
	sem := make(chan struct{}, ownConcurrency)
	var wg sync.WaitGroup
	for _, policy := range auto {
		a := policy.Spec.EffectiveAuto()
		if sampledByCluster(policy, &a) {
			continue
		}
		sp := readSpan(policy, &a, now)
		if sp.hold != "" {
			continue
		}
		qs, err := buildQueries(policy, &a, sp.rng)
		if err != nil {
			continue // the reconcile reports it
		}
		key := types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ans := s.p.fetch(ctx, policy, qs, sp, now)
			s.p.memory.setOwn(key, ownReading{since: sp.since, answers: ans})
		})
	}
	wg.Wait()
}

// due returns the policies whose interval has passed since they were last
// due, and those whose last evaluation found nothing to read and now would,
// and records them as due now. The second kind is the first reading after a
// delay change: it needs two ticks scraped after the change, which, with the
// scrape interval's lag, may come a tick after the interval passed.
func (s *Sampler) due(auto []*tailcutv1alpha1.HedgePolicy, now time.Time, tick time.Duration) []*tailcutv1alpha1.HedgePolicy {
	var due []*tailcutv1alpha1.HedgePolicy
	for _, p := range auto {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		last, ok := s.notified[key]
		// A quarter tick of slack for timer jitter; more would evaluate
		// before the interval passed, when no delay may change yet.
		intervalPassed := !ok || now.Sub(last) >= p.Spec.EffectiveEvaluationInterval()-tick/4
		if !intervalPassed && (!s.unread[key] || !s.readable(p, now)) {
			continue
		}
		s.notified[key] = now
		s.unread[key] = !s.readable(p, now)
		due = append(due, p)
	}
	if len(s.notified) > len(auto) {
		current := map[types.NamespacedName]bool{}
		for _, p := range auto {
			current[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
		}
		for key := range s.notified {
			if !current[key] {
				delete(s.notified, key)
				delete(s.unread, key)
			}
		}
	}
	return due
}

// readable says whether an evaluation of the policy now would find its span
// in memory.
func (s *Sampler) readable(p *tailcutv1alpha1.HedgePolicy, now time.Time) bool {
	a := p.Spec.EffectiveAuto()
	if !sampledByCluster(p, &a) {
		return true
	}
	sp := readSpan(p, &a, now)
	if sp.hold != "" {
		return false
	}
	_, _, ok := s.p.sampled(p, &a, sp)
	return ok
}

// enqueue asks for the evaluation of the policies.
func (s *Sampler) enqueue(ctx context.Context, due []*tailcutv1alpha1.HedgePolicy) {
	if s.notify == nil {
		return
	}
	for _, p := range due {
		ev := event.GenericEvent{Object: &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}}
		select {
		case s.notify <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// memory is what the sampler read, for Estimate.
type memory struct {
	mu    sync.RWMutex
	ticks []envoyTick // oldest first
	own   map[types.NamespacedName]ownReading
}

// envoyTick is every hedged cluster's cumulative totals at one tick, or the
// error that kept the sampler from reading them.
type envoyTick struct {
	at       time.Time
	err      error
	clusters map[string]*clusterTotals
}

// clusterTotals are one cluster's cumulative counts, summed over the proxies.
type clusterTotals struct {
	buckets           map[string]float64 // by le
	retries, attempts float64
	counters          bool
	// scraped is when Prometheus scraped the counters (the oldest proxy's);
	// zero when unknown.
	scraped time.Time
}

// ownReading is what a Workload or Custom policy's queries answered, for the
// span that starts at since.
type ownReading struct {
	since   time.Time
	answers answers
}

// add keeps a tick and forgets those older than keep, but for one: a span
// starting at the edge still needs the tick before it.
func (m *memory) add(t envoyTick, keep time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ticks = append(m.ticks, t)
	cut := 0
	for cut+1 < len(m.ticks) && t.at.Sub(m.ticks[cut+1].at) >= keep {
		cut++
	}
	m.ticks = slices.Delete(m.ticks, 0, cut)
}

func (m *memory) setOwn(key types.NamespacedName, r ownReading) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.own[key] = r
}

// ownAnswers returns what a Workload or Custom policy's queries answered for
// the span sp, if the sampler read that span.
func (m *memory) ownAnswers(key types.NamespacedName, sp span) (answers, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.own[key]
	if !ok || !r.since.Equal(sp.since) {
		return answers{}, false
	}
	return r.answers, true
}

// envoyAnswers computes a cluster's readings from the ticks: over the span
// since sp.since (adjusted to the ticks it covers), and, when the guard needs
// them, over the window that ended one window ago and the last interval. ok
// is false until two ticks cover the span.
func (m *memory) envoyAnswers(cluster string, sp span, window, interval time.Duration) (answers, span, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := len(m.ticks)
	if n < 2 {
		return answers{}, sp, false
	}
	latest := m.ticks[n-1]
	if latest.err != nil {
		a := answer{err: latest.err}
		return answers{buckets: a, retries: a, attempts: a}, sp, true
	}
	from := m.firstScrapedAfter(cluster, sp.since)
	if from < 0 || from >= n-1 {
		return answers{}, sp, false
	}
	// The span's start is the tick it is read from; its length stays the one
	// asked for, so that messages do not change while memory fills up.
	sp.since = m.ticks[from].at
	a := m.increase(cluster, from, n-1)
	a.prev = m.increase(cluster, m.before(latest.at.Add(-2*window)), m.before(latest.at.Add(-window))).buckets
	a.last = m.increase(cluster, m.before(latest.at.Add(-interval)), n-1).buckets
	a.earlier = m.increase(cluster, m.before(latest.at.Add(-2*interval)), m.before(latest.at.Add(-interval))).buckets
	return a, sp, true
}

// firstScrapedAfter is the index of the first good tick that holds the
// cluster as scraped at or after t (by the tick's time when the scrape time is
// unknown), or, when memory begins after t, of the oldest tick; -1 when there
// is none yet.
func (m *memory) firstScrapedAfter(cluster string, t time.Time) int {
	for j, tk := range m.ticks {
		if tk.err != nil {
			continue
		}
		at := tk.at
		if c := tk.clusters[cluster]; c != nil && !c.scraped.IsZero() {
			at = c.scraped
		}
		if j == 0 && tk.at.After(t) || !at.Before(t) {
			return j
		}
	}
	return -1
}

// before is the index of the last good tick at or before t, or of the oldest.
func (m *memory) before(t time.Time) int {
	i := 0
	for j, tk := range m.ticks {
		if tk.at.After(t) {
			break
		}
		if tk.err == nil {
			i = j
		}
	}
	return i
}

// increase sums a cluster's increases from tick i to tick j, skipping ticks
// that failed. A count that went down was reset: its later value is the
// increase.
func (m *memory) increase(cluster string, i, j int) answers {
	if i >= j {
		return answers{buckets: answer{err: errEmptyCDF}}
	}
	inc := &clusterTotals{buckets: map[string]float64{}}
	var prev *clusterTotals
	seen := false
	for k := i; k <= j; k++ {
		tk := m.ticks[k]
		if tk.err != nil {
			continue
		}
		cur := tk.clusters[cluster]
		if cur == nil {
			continue
		}
		seen = seen || k == j
		if prev != nil {
			for le, v := range cur.buckets {
				inc.buckets[le] += grow(prev.buckets[le], v)
			}
			inc.retries += grow(prev.retries, cur.retries)
			inc.attempts += grow(prev.attempts, cur.attempts)
			inc.counters = inc.counters || cur.counters
		} else if k > i {
			// The cluster appeared after the span began: its counts are new.
			for le, v := range cur.buckets {
				inc.buckets[le] += v
			}
			inc.retries, inc.attempts, inc.counters = cur.retries, cur.attempts, cur.counters
		}
		prev = cur
	}
	if !seen {
		// No series for the cluster now: Envoy has not served the route,
		// or Prometheus does not scrape it.
		return answers{buckets: answer{v: model.Vector{}}, retries: answer{v: model.Vector{}}, attempts: answer{v: model.Vector{}}}
	}
	var vec model.Vector
	for le, v := range inc.buckets {
		vec = append(vec, &model.Sample{Metric: model.Metric{model.BucketLabel: model.LabelValue(le)}, Value: model.SampleValue(v)})
	}
	a := answers{buckets: answer{v: vec}, retries: answer{v: model.Vector{}}, attempts: answer{v: model.Vector{}}}
	if inc.counters {
		a.retries.v = model.Vector{{Value: model.SampleValue(inc.retries)}}
		a.attempts.v = model.Vector{{Value: model.SampleValue(inc.attempts)}}
	}
	return a
}

// grow is a counter's increase from a to b: b itself after a reset.
func grow(a, b float64) float64 {
	if b < a {
		return b
	}
	return b - a
}
