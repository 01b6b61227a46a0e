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
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// DefaultQueryTimeout bounds each Prometheus query when PrometheusOptions.Timeout
// is zero.
const DefaultQueryTimeout = 5 * time.Second

// PrometheusOptions configure the Prometheus estimator.
type PrometheusOptions struct {
	// Address is Prometheus' base URL, for example http://prometheus:9090.
	Address string
	// Timeout bounds each query. Zero means DefaultQueryTimeout.
	Timeout time.Duration
	// RoundTripper carries the queries; nil means http.DefaultTransport. Set it
	// for TLS or authentication.
	RoundTripper http.RoundTripper
}

// Prometheus derives the hedge delay of Auto policies from latency histograms
// and hedge counters in Prometheus. Its sampler (Sampler) is the only reader
// of Prometheus: Estimate decides from what the sampler read, and sends no
// query. It remembers its last decision for each policy (decisions) and takes
// a new one only when the sampler made the policy due, the spec changed or an
// interval passed: a proxy's ACK, which reconciles the policy, is answered
// with the decision in force. The delay in force and when it last changed are
// its own memory too; the policy's status reports them, and seeds them after
// a start or a failover. Time comes only from the now argument of Estimate
// and of the sampler's Tick (the evaluation time of every query). Static
// policies are answered without a query.
//
// What it reads, over the span readSpan picks (since the last delay change,
// at most one window):
//   - latency from a histogram: for source Envoy the hedged route's own
//     cluster, envoy_cluster_upstream_rq_time (ms), which ordinary client
//     traffic fills; for Workload the application's histogram; for Custom the
//     user's query (seconds). Below the delay in force the histogram is exact;
//     histogram.go says how it is read;
//   - with tailcut's xDS publisher, the hedged cluster's upstream_rq_retry and
//     upstream_rq_total. Envoy counts every attempt (first, hedge or retry) in
//     upstream_rq_total and every hedge or retry in upstream_rq_retry, so the
//     hedge rate is retry / (total - retry): extra requests per original
//     request, the quantity the budget bounds, and exactly the share of
//     requests slower than the delay.
//
// Traffic that skips hedging (the x-tailcut-bypass header, other methods and
// paths) runs on another cluster and is never read.
//
// Custom queries return a single number, so they get neither the minSamples
// check, the censoring rules, nor the "hedging hurts" guard; the budget guard
// still applies when the hedge counters exist.
type Prometheus struct {
	api     v1.API
	timeout time.Duration
	// memory is what the sampler read.
	memory *memory
	// decided is what Estimate last decided for each policy (decisions).
	decided *decisions
}

var _ Estimator = (*Prometheus)(nil)

// NewPrometheus returns an estimator that queries the Prometheus at opts.Address.
func NewPrometheus(opts PrometheusOptions) (*Prometheus, error) {
	if opts.Address == "" {
		return nil, errors.New("prometheus address is empty")
	}
	client, err := api.NewClient(api.Config{Address: opts.Address, RoundTripper: opts.RoundTripper})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %q: %w", opts.Address, err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	return newPrometheus(v1.NewAPI(client), timeout), nil
}

func newPrometheus(api v1.API, timeout time.Duration) *Prometheus {
	return &Prometheus{api: api, timeout: timeout, memory: newMemory(), decided: newDecisions()}
}

// Estimate implements Estimator. Metric outages come back as a Result with
// Derived false; the only error is an *InvalidQueryError.
func (p *Prometheus) Estimate(_ context.Context, policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, error) {
	spec := &policy.Spec
	if spec.Suspend || spec.EffectiveDelayMode() != tailcutv1alpha1.DelayModeAuto {
		// What is in force now was not derived: a later Auto decision
		// starts from the status again, not from an older one of its own.
		p.decided.drop(policy)
		if spec.Suspend {
			return Suspended(policy), nil
		}
		res := Static(spec)
		record(policy, res, "")
		return res, nil
	}
	if res, ok := p.decided.current(policy, now); ok {
		return res, nil
	}
	policy = p.decided.prior(policy)
	auto := spec.EffectiveAuto()
	sp := readSpan(policy, &auto, now)
	qs, err := buildQueries(policy, &auto, sp.rng)
	if err != nil {
		record(policy, Result{}, tailcutv1alpha1.ReasonInvalidQuery)
		return Result{}, err
	}
	var r readings
	var coarse time.Duration
	if sp.hold == "" {
		a, sampled, ok := p.sampled(policy, &auto, sp)
		if ok {
			sp, coarse = sampled, a.coarse
			r = p.interpret(policy, &auto, qs, sp, a)
		} else {
			sp.hold = "the sampler has not read this span yet"
		}
	}
	res := decide(policy, &auto, sp, r, now)
	if sampledByCluster(policy, &auto) {
		cluster := plan.ClusterName(policy.Namespace, spec.TargetRef.Name, spec.TargetRef.Port)
		loads := p.memory.endpointLoads(cluster, now, 2*spec.EffectiveEvaluationInterval())
		res.SlowEndpoints, res.EndpointsNote = slowEndpoints(loads, spec.EffectiveBudget().MaxExtraLoadPercent, policy.Status.SlowEndpoints, now)
	}
	if coarse > 0 {
		res.Reason += fmt.Sprintf("; the sampler's memory is full: it keeps this route's totals %s apart, spans start up to that much late",
			promDuration(coarse))
	}
	failed := ""
	if sp.hold == "" && !res.Derived {
		failed = res.DerivedReason
	}
	record(policy, res, failed)
	return p.decided.remember(policy, now, res), nil
}

// sampled is what the sampler read for the policy's span, and the span it
// covers.
func (p *Prometheus) sampled(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, sp span) (answers, span, bool) {
	if sampledByCluster(policy, auto) {
		cluster := plan.ClusterName(policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port)
		return p.memory.envoyAnswers(cluster, sp, auto.Window.Duration, policy.Spec.EffectiveEvaluationInterval())
	}
	// The sampler read the span as it stood at its tick, which the
	// reconcile that evaluates the policy follows by milliseconds or more
	// (its work queue): the reading is the policy's if the span at that tick
	// is the one it read, and the tick is less than an interval old.
	r, ok := p.memory.ownAnswers(types.NamespacedName{Namespace: policy.Namespace, Name: policy.Name})
	if !ok {
		return answers{}, sp, false
	}
	atTick := readSpan(policy, auto, r.at)
	now := sp.since.Add(sp.rng)
	if atTick.hold != "" || !r.since.Equal(atTick.since) || now.Before(r.at) || now.Sub(r.at) >= policy.Spec.EffectiveEvaluationInterval() {
		return answers{}, sp, false
	}
	return r.answers, atTick, true
}

// sampledByCluster says whether the sampler reads the policy with the
// batched queries over tailcut's Envoy clusters; the others (Workload,
// Custom, and any policy on an Istio mesh) have queries of their own.
func sampledByCluster(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay) bool {
	return auto.Source == tailcutv1alpha1.EstimateSourceEnvoy && policy.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishXDS
}

// changeSettle is left out at the start of a span that begins at a delay
// change: the push reaches Envoy a little after the decision (milliseconds:
// the publish follows it in the same reconcile). The estimator knows the
// change to the millisecond; a whole second here, with the span cut to whole
// seconds, started spans up to 2 s after the change, and the first reading
// after it often found one scrape in the span, not two, and waited a tick:
// the local e2e's delay reached a shifted fast mode 13.04 s after the shift
// (limit 13 s). Status, in whole seconds, had started them about 1 s in.
const changeSettle = 500 * time.Millisecond

// span is the stretch of time one evaluation reads: (since, now].
type span struct {
	rng   time.Duration
	since time.Time
	// sinceChange is true when the span starts at the last delay change, and
	// so is shorter than the window.
	sinceChange bool
	// delay is the delay in force over the whole span (0: hedging off), and
	// censorAt the same in seconds (+Inf when hedging was off).
	delay    time.Duration
	censorAt float64
	// hold, when set, says why nothing is read: the delay changed less than an
	// evaluation interval ago.
	hold string
}

// readSpan picks the span: one window, or only the time since the last delay
// change when that is shorter. Everything read then belongs to one delay: the
// hedge counters measure exactly the share of requests slower than it, the
// histogram is exact below it, and a breach of the budget shows at the first
// evaluation after the change that caused it.
func readSpan(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, now time.Time) span {
	st := &policy.Status
	sp := span{rng: auto.Window.Duration, censorAt: math.Inf(1)}
	if st.EffectiveDelay != nil && st.EffectiveDelay.Duration > 0 {
		sp.delay = st.EffectiveDelay.Duration
		sp.censorAt = sp.delay.Seconds()
	}
	if st.LastDelayChange != nil {
		age := now.Sub(st.LastDelayChange.Time)
		interval := policy.Spec.EffectiveEvaluationInterval()
		switch {
		case age < interval-dueSlack(interval):
			sp.hold = fmt.Sprintf("the delay changed %s ago; the next reading waits until it has been in force for evaluationInterval %s",
				max(age, 0).Round(time.Second), interval)
		case age-changeSettle < sp.rng:
			sp.rng, sp.sinceChange = (age - changeSettle).Truncate(time.Second), true
		}
	}
	sp.since = now.Add(-sp.rng)
	return sp
}

// answer is one query's result.
type answer struct {
	v   model.Value
	err error
}

// answers is what Prometheus said to one evaluation of a policy: sent as the
// policy's own queries (fetch), or taken from the sampler's memory of every
// hedged cluster. interpret reads both the same way.
type answers struct {
	quantile, buckets, retries, attempts answer
	// prev, last and earlier are the histograms of the window that ended one
	// window ago (for the "hedging hurts" guard; empty when it is not
	// needed), of the last evaluation interval and of the one before it.
	prev, last, earlier answer
	// parts are the span's histogram cut at every tick the sampler read in
	// it, from its memory; none for a policy's own queries.
	parts []answer
	// coarse is, when the sampler's memory is full, how far apart it keeps
	// the cluster's totals (memory.fit); zero when as its retention asks.
	coarse time.Duration
}

// needsHistory says whether the "hedging hurts" guard needs the previous
// window: only while hedging runs and sends a real share of extra requests.
func needsHistory(policy *tailcutv1alpha1.HedgePolicy, sp span, h *hedgeReading) bool {
	budget := float64(policy.Spec.EffectiveBudget().MaxExtraLoadPercent)
	return h != nil && sp.delay > 0 && h.percent() >= hurtsMinShare*budget
}

// fetch sends the policy's queries at time now.
func (p *Prometheus) fetch(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, qs querySet, sp span, now time.Time) answers {
	var a answers
	// The last two intervals bring the delay down after a slow stretch
	// (recent.go); the window before serves the "hedging hurts" guard alone.
	dst := []*answer{&a.quantile, &a.buckets, &a.retries, &a.attempts, &a.last, &a.earlier}
	var wg sync.WaitGroup
	for i, q := range []string{qs.quantile, qs.buckets, qs.retries, qs.attempts, qs.lastBuckets, qs.earlierBuckets} {
		if q == "" {
			continue
		}
		wg.Go(func() {
			v, err := p.query(ctx, q, now)
			*dst[i] = answer{v, err}
		})
	}
	wg.Wait()
	if h, _ := p.hedge(qs, a.retries, a.attempts); qs.prevBuckets != "" && needsHistory(policy, sp, h) {
		a.prev.v, a.prev.err = p.query(ctx, qs.prevBuckets, now)
	}
	return a
}

// interpret checks what came back for one evaluation and turns it into
// readings.
func (p *Prometheus) interpret(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, qs querySet, sp span, a answers) readings {
	var r readings
	r.hedge, r.hedgeNote = p.hedge(qs, a.retries, a.attempts)

	if qs.custom {
		if a.quantile.err != nil {
			r.fail = classify(a.quantile.err, "quantile", p.timeout)
			return r
		}
		r.quantile, r.fail = single(a.quantile.v, "quantile")
		return r
	}
	if a.buckets.err != nil {
		r.fail = classify(a.buckets.err, "bucket", p.timeout)
		return r
	}
	c, nd := bucketCDF(a.buckets.v, qs.boundScale, "bucket")
	switch {
	case nd == nil:
	case nd.reason == tailcutv1alpha1.ReasonNoTraffic && sp.delay > 0 && r.hedge != nil:
		// The counters saw requests; Envoy publishes histograms only at its
		// stats flush (tailcut's Envoy: when scraped, showing the scrape
		// before; an Istio sidecar: every 5s), so a short span can be empty.
		r.thin = fmt.Sprintf("the latency histogram shows no request in the last %s yet, the counters %.0f (Envoy publishes histograms at its stats flush)",
			promDuration(sp.rng), r.hedge.requests)
		return r
	case nd.reason == tailcutv1alpha1.ReasonNoTraffic:
		r.fail = newNoData(nd.reason, "no requests on the hedged route in the last %s", promDuration(sp.rng))
		return r
	case nd.reason == tailcutv1alpha1.ReasonNoData && sp.sinceChange && sp.delay > 0:
		// Prometheus has not scraped twice since the change yet.
		r.thin = fmt.Sprintf("no latency samples since the delay changed %s ago", promDuration(sp.rng))
		return r
	default:
		r.fail = nd
		return r
	}
	r.cdf, r.edge, r.samples = c, qs.edge, c.total()
	if r.samples < float64(auto.MinSamples) {
		if !sp.sinceChange || sp.delay == 0 {
			r.fail = newNoData(tailcutv1alpha1.ReasonTooFewSamples, "%s", fewSamples(r.samples, sp.rng, auto.MinSamples))
			return r
		}
		r.thin = fmt.Sprintf("only %.0f requests since the delay changed %s ago, fewer than minSamples %d",
			r.samples, promDuration(sp.rng), auto.MinSamples)
	}
	for _, part := range a.parts {
		if c := histogramOf(part, qs.boundScale); c != nil {
			r.parts = append(r.parts, c)
		}
	}
	r.prev, r.last, r.earlier = histogramOf(a.prev, qs.boundScale), histogramOf(a.last, qs.boundScale), histogramOf(a.earlier, qs.boundScale)
	return r
}

// histogramOf reads one more latency histogram, nil when it cannot.
func histogramOf(a answer, scale float64) *cdf {
	if a.err != nil || a.v == nil {
		return nil
	}
	c, nd := bucketCDF(a.v, scale, "bucket")
	if nd != nil {
		return nil
	}
	return c
}

// hedge reads the hedge counters. Their absence is normal (nothing hedged yet,
// or not published through tailcut's xDS), so it only disables the budget and
// "hedging hurts" guards.
func (p *Prometheus) hedge(qs querySet, ra, aa answer) (*hedgeReading, string) {
	if !qs.counters {
		return nil, "no hedge counters for this source"
	}
	if ra.err != nil {
		return nil, classify(ra.err, "retry", p.timeout).msg
	}
	if aa.err != nil {
		return nil, classify(aa.err, "request", p.timeout).msg
	}
	retries, nd := single(ra.v, "retry")
	if nd != nil && qs.hedgeHint != "" && nd.reason == tailcutv1alpha1.ReasonNoData {
		return nil, qs.hedgeHint
	}
	if nd != nil {
		return nil, nd.msg
	}
	attempts, nd := single(aa.v, "request")
	if nd != nil {
		return nil, nd.msg
	}
	requests := attempts - retries
	if math.IsNaN(retries) || math.IsNaN(attempts) || retries < 0 || requests <= 0 {
		return nil, fmt.Sprintf("no requests on the hedged route (%.0f attempts, %.0f retries)", attempts, retries)
	}
	return &hedgeReading{retries: retries, requests: requests}, ""
}

// query runs one instant query at time now, bounded by the per-query timeout
// on both sides of the connection.
func (p *Prometheus) query(ctx context.Context, q string, now time.Time) (model.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	v, _, err := p.api.Query(ctx, q, now, v1.WithTimeout(p.timeout))
	return v, err
}
