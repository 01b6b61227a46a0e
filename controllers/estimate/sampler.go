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
// policies: the cumulative latency histogram, hedge and request counters of
// every hedged cluster (hedgedClusters), summed over the proxies. The sampler
// keeps these totals for two windows. A policy's reading over any span is the
// difference of two ticks, computed when its reconcile asks for it (Estimate),
// from memory. A counter that went down between two ticks was reset (a proxy
// restarted): its later value is the increase, as Prometheus' increase()
// counts it.
//
// Workload and Custom sources have a query of their own per policy: the
// sampler sends it at each tick, for the span the policy's status asks for, and
// keeps the answers for its reconcile.
//
// The tick is the shortest evaluationInterval among Auto policies, between
// minTick and maxTick. After each tick the sampler enqueues the policies whose
// interval has passed, so they are evaluated with what it just read.
const (
	minTick = 5 * time.Second
	maxTick = 30 * time.Second
	// ownConcurrency bounds the per-policy queries in flight.
	ownConcurrency = 8
)

// hedgedClusters matches tailcut's hedged clusters (plan.ClusterName) and
// nothing else: not the bypass clusters, not the xDS cluster.
const hedgedClusters = `tailcut_.+_[0-9]+`

// The sampler's queries, one per tick for every policy of source Envoy.
var (
	sampleBuckets  = `sum by (envoy_cluster_name, le) (envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"` + hedgedClusters + `"})`
	sampleRetries  = `sum by (envoy_cluster_name) (envoy_cluster_upstream_rq_retry{envoy_cluster_name=~"` + hedgedClusters + `"})`
	sampleAttempts = `sum by (envoy_cluster_name) (envoy_cluster_upstream_rq_total{envoy_cluster_name=~"` + hedgedClusters + `"})`
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
	return &Sampler{p: p, list: list, notify: notify, log: log, notified: map[types.NamespacedName]time.Time{}}
}

// NeedLeaderElection is true: only the leader evaluates policies.
func (s *Sampler) NeedLeaderElection() bool { return true }

// Start ticks until ctx ends.
func (s *Sampler) Start(ctx context.Context) error {
	for {
		next := s.Tick(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}

// Tick reads Prometheus once, at now, and returns the time until the next tick.
func (s *Sampler) Tick(ctx context.Context, now time.Time) time.Duration {
	list, err := s.list(ctx)
	if err != nil {
		s.log.Error(err, "listing HedgePolicies; sampling again at the next tick")
		return minTick
	}
	tick, keep := maxTick, 2*time.Minute
	var auto []*tailcutv1alpha1.HedgePolicy
	envoy := false
	for i := range list {
		p := &list[i]
		if !p.DeletionTimestamp.IsZero() || p.Spec.Suspend || p.Spec.EffectiveDelayMode() != tailcutv1alpha1.DelayModeAuto {
			continue
		}
		auto = append(auto, p)
		a := p.Spec.EffectiveAuto()
		tick = min(tick, p.Spec.EffectiveEvaluationInterval())
		keep = max(keep, 2*a.Window.Duration)
		envoy = envoy || a.Source == tailcutv1alpha1.EstimateSourceEnvoy
	}
	tick = max(tick, minTick)
	if envoy {
		s.p.memory.add(s.readEnvoy(ctx, now), keep+2*tick)
	}
	s.readOwn(ctx, auto, now)
	s.enqueue(ctx, auto, now, tick)
	return tick
}

// readEnvoy reads every hedged cluster's totals.
func (s *Sampler) readEnvoy(ctx context.Context, now time.Time) envoyTick {
	t := envoyTick{at: now, clusters: map[string]*clusterTotals{}}
	var buckets, retries, attempts answer
	var wg sync.WaitGroup
	for q, dst := range map[string]*answer{sampleBuckets: &buckets, sampleRetries: &retries, sampleAttempts: &attempts} {
		wg.Go(func() {
			v, err := s.p.query(ctx, q, now)
			*dst = answer{v, err}
		})
	}
	wg.Wait()
	for _, a := range []answer{buckets, retries, attempts} {
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
	totals(retries.v, func(c *clusterTotals, smp *model.Sample) { c.retries, c.counters = float64(smp.Value), true })
	totals(attempts.v, func(c *clusterTotals, smp *model.Sample) { c.attempts = float64(smp.Value) })
	return t
}

// readOwn sends the per-policy queries of Workload and Custom policies.
func (s *Sampler) readOwn(ctx context.Context, auto []*tailcutv1alpha1.HedgePolicy, now time.Time) {
	sem := make(chan struct{}, ownConcurrency)
	var wg sync.WaitGroup
	for _, policy := range auto {
		a := policy.Spec.EffectiveAuto()
		if a.Source == tailcutv1alpha1.EstimateSourceEnvoy {
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

// enqueue asks for the evaluation of every policy whose interval has passed.
func (s *Sampler) enqueue(ctx context.Context, auto []*tailcutv1alpha1.HedgePolicy, now time.Time, tick time.Duration) {
	if s.notify == nil {
		return
	}
	for _, p := range auto {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		if last, ok := s.notified[key]; ok && now.Sub(last) < p.Spec.EffectiveEvaluationInterval()-tick/2 {
			continue
		}
		s.notified[key] = now
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
	from := m.before(sp.since)
	if from >= n-1 {
		return answers{}, sp, false
	}
	// The span's start is the tick it is read from; its length stays the one
	// asked for, so that messages do not change while memory fills up.
	sp.since = m.ticks[from].at
	a := m.increase(cluster, from, n-1)
	a.prev = m.increase(cluster, m.before(latest.at.Add(-2*window)), m.before(latest.at.Add(-window))).buckets
	a.last = m.increase(cluster, m.before(latest.at.Add(-interval)), n-1).buckets
	return a, sp, true
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
