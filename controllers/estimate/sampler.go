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
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// The sampler reads Prometheus on its own schedule, so that no reconcile ever
// waits for it: a slow or hung Prometheus delays delay changes, never endpoint
// or route updates.
//
// For the Envoy source, one tick sends three queries whatever the number of
// policies: the cumulative latency histogram and the hedge and request
// counters of every hedged cluster (hedgedClusters), one series per proxy,
// and when Prometheus scraped those counters; once per evaluation interval
// a fourth reads each endpoint's scrapes over a window (endpoints.go). The sampler keeps these totals
// for two windows. A policy's reading over any span is the difference of two
// ticks, computed when its reconcile asks for it (Estimate), from memory,
// proxy by proxy, and then summed (increase says how a restart, a missed
// scrape or a new proxy count). A span starts at the first tick whose
// counters were scraped after the span began: a tick taken after a delay
// change may still hold a scrape from before it, and counting that scrape's
// requests against the new delay (hedged at the old one) would misjudge it.
//
// Workload and Custom sources have a query of their own per policy: the
// sampler sends it when the policy is due, for the span the policy's status
// asks for, and keeps the answers for its reconcile.
//
// The tick divides the shortest evaluationInterval among Auto policies into
// ticksPerEval (fewer when a tick would be shorter than minTick, more when
// longer than maxTick), so that a delay change has two ticks of its own by the
// next evaluation: at most ten queries per interval. After each tick the
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
//
// The histogram and the counters are not summed over the proxies: a sum falls
// when one proxy restarts, stops, or misses a scrape (Prometheus then marks
// its series stale), and a fall read as a reset counted the other proxies'
// whole lifetime, hedged at older delays, as new requests (issue #23: 9,470
// requests read instead of about 2,000 when one of two Envoys stopped, 15%
// "hedged", the delay raised from 18.7 to 50.6ms). Each series comes with
// all its labels: besides the cluster (and le), the ones that tell the
// proxies apart, whatever the scrape config adds (instance, pod, namespace,
// service, endpoint, job with a ServiceMonitor). There is nothing to
// aggregate: Envoy exports these stats with no label but the cluster.
var (
	sampleBuckets  = envoyLatencyMetric + `_bucket{envoy_cluster_name=~"` + hedgedClusters + `"}`
	sampleCounters = `{__name__=~"` + retryMetric + `|` + attemptMetric + `",envoy_cluster_name=~"` + hedgedClusters + `"}`
	// sampleScraped is when the oldest of a cluster's request counters (one
	// per proxy) was scraped, in seconds since the epoch.
	sampleScraped = `min by (envoy_cluster_name) (timestamp(` + attemptMetric + `{envoy_cluster_name=~"` + hedgedClusters + `"}))`
)

const (
	retryMetric   = "envoy_cluster_upstream_rq_retry"
	attemptMetric = "envoy_cluster_upstream_rq_total"
)

// notProxy are the labels left out of a series' identity: the metric's name
// and the bucket's bound. The others name one proxy's counts of one cluster.
var notProxy = map[model.LabelName]struct{}{model.MetricNameLabel: {}, model.BucketLabel: {}}

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
	// endpointsAsked is when the per-endpoint query was last sent.
	endpointsAsked time.Time
}

var (
	_ manager.Runnable               = (*Sampler)(nil)
	_ manager.LeaderElectionRunnable = (*Sampler)(nil)
)

// Sampler is the estimator's reader of Prometheus: Estimate decides from
// what it read. notify, when not nil, receives the policies to evaluate
// after each tick.
func (p *Prometheus) Sampler(list PolicyLister, notify chan<- event.GenericEvent, log logr.Logger) *Sampler {
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

// dueSlack is how much of an evaluation interval may be missing when the
// sampler makes a policy due (a quarter of its tick, for timer jitter), and
// so how much younger than an interval a delay change may be and still count
// as an interval old. The decision that made the change ran a little after
// the tick that made it due (its reconcile: milliseconds, or more behind a
// queue), and the next due tick comes an interval after that tick: without
// the slack, the next evaluation found the change younger than an interval
// and waited a tick more (the local e2e's delay then reached the shifted
// fast mode 13.05 s after the shift, against 2 intervals and a scrape, 13 s).
// Status keeps times in whole seconds, which hid this until the estimator
// kept its own, exact, time of the change.
func dueSlack(interval time.Duration) time.Duration { return tickFor(interval) / 4 }

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
	auto []*tailcutv1alpha1.HedgePolicy
	tick time.Duration // see tickFor
	// shortest is the shortest evaluation interval.
	shortest time.Duration
	keep     time.Duration // how long readings are kept: two of the longest windows
	envoy    bool          // a policy reads the Envoy source
	// retain is, for each cluster read for a policy, what memory keeps of it.
	retain map[string]retention
}

func (s *Sampler) scan(ctx context.Context) (scanned, error) {
	list, err := s.list(ctx)
	if err != nil {
		return scanned{}, err
	}
	sc := scanned{tick: maxTick, keep: 2 * time.Minute, retain: map[string]retention{}}
	for i := range list {
		p := &list[i]
		if !p.DeletionTimestamp.IsZero() || p.Spec.Suspend || p.Spec.EffectiveDelayMode() != tailcutv1alpha1.DelayModeAuto {
			continue
		}
		sc.auto = append(sc.auto, p)
		a := p.Spec.EffectiveAuto()
		sc.tick = min(sc.tick, p.Spec.EffectiveEvaluationInterval())
		sc.keep = max(sc.keep, 2*a.Window.Duration)
		if sampledByCluster(p, &a) {
			sc.envoy = true
			cluster := plan.ClusterName(p.Namespace, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port)
			interval := p.Spec.EffectiveEvaluationInterval()
			r, ok := sc.retain[cluster]
			if !ok {
				r.spacing = interval
			}
			r.keep = max(r.keep, 2*a.Window.Duration, 2*interval)
			r.spacing = min(r.spacing, interval)
			sc.retain[cluster] = r
		}
	}
	for c, r := range sc.retain {
		r.spacing = tickFor(r.spacing)
		r.keep += 2 * r.spacing
		sc.retain[c] = r
	}
	sc.shortest = sc.tick
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
		// Once per evaluation interval, answered or not, beside the tick's
		// other queries: it reads the whole window.
		var wg sync.WaitGroup
		if now.Sub(s.endpointsAsked) >= sc.shortest-sc.tick/4 {
			s.endpointsAsked = now
			wg.Go(func() {
				if scrapes, ok := s.readEndpoints(ctx, now); ok {
					s.p.memory.setEndpoints(now, scrapes)
				}
			})
		}
		s.p.memory.add(s.readEnvoy(ctx, now), sc.keep+2*sc.tick, sc.retain)
		wg.Wait()
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
	cluster := func(smp *model.Sample) *clusterTotals {
		name := string(smp.Metric[envoyClusterLabel])
		c := t.clusters[name]
		if c == nil {
			c = &clusterTotals{series: map[uint64]*seriesTotals{}}
			t.clusters[name] = c
		}
		return c
	}
	totals := func(v model.Value, fill func(*seriesTotals, *model.Sample)) {
		vec, _ := v.(model.Vector)
		for _, smp := range vec {
			c := cluster(smp)
			id := model.SignatureWithoutLabels(smp.Metric, notProxy)
			s := c.series[id]
			if s == nil {
				s = &seriesTotals{}
				c.series[id] = s
			}
			fill(s, smp)
		}
	}
	totals(buckets.v, func(s *seriesTotals, smp *model.Sample) {
		if s.buckets == nil {
			s.buckets = map[string]float64{}
		}
		s.buckets[string(smp.Metric[model.BucketLabel])] = float64(smp.Value)
	})
	totals(counters.v, func(s *seriesTotals, smp *model.Sample) {
		switch smp.Metric[model.MetricNameLabel] {
		case retryMetric:
			s.retries, s.counters = float64(smp.Value), true
		case attemptMetric:
			s.attempts, s.counters = float64(smp.Value), true
		}
	})
	vec, _ := scraped.v.(model.Vector)
	for _, smp := range vec {
		cluster(smp).scraped = time.UnixMilli(int64(float64(smp.Value) * 1000))
	}
	return t
}

// readEndpoints reads every hedged cluster's per-endpoint scrapes
// (endpoints.go). A failed query reads nothing: the loads held age out.
func (s *Sampler) readEndpoints(ctx context.Context, now time.Time) (map[string]map[endpointSeries][]endpointScrape, bool) {
	v, err := s.p.query(ctx, sampleEndpoints, now)
	if err != nil {
		s.log.Info("reading the endpoints failed; the readings held age out", "error", err.Error())
		return nil, false
	}
	m, _ := v.(model.Matrix)
	return endpointScrapes(m), true
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
		sp := readSpan(s.p.decided.prior(policy), &a, now)
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
			s.p.memory.setOwn(key, ownReading{at: now, since: sp.since, answers: ans})
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
		s.p.decided.markDue(key)
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
		s.p.decided.forget(func(key types.NamespacedName) bool { return current[key] })
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
	sp := readSpan(s.p.decided.prior(p), &a, now)
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
