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

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
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
// and hedge counters in Prometheus. It keeps no state of its own: the previous
// decision is read from the policy's status, and time comes only from the now
// argument of Estimate (it is also the evaluation time of every query). Static
// policies are answered without a query.
//
// What it reads, over spec.delay.auto.window:
//   - latency from a histogram hedging does not censor: for source Envoy the
//     bypass cluster's envoy_cluster_upstream_rq_time (ms; the hedged cluster's
//     own histogram loses the slow attempts hedging resets), for Workload the
//     application's histogram, for Custom the user's query (seconds);
//   - the request count (increase of _count), refused below minSamples;
//   - the per-bucket counts, from which the delay is chosen (histogram.go);
//   - with tailcut's xDS publisher, the hedged cluster's upstream_rq_retry and
//     upstream_rq_total. Envoy counts every attempt (first, hedge or retry) in
//     upstream_rq_total and every hedge or retry in upstream_rq_retry, so the
//     hedge rate is retry / (total - retry): extra requests per original
//     request, the quantity the budget bounds.
//
// Custom queries return a single number, so they get neither the minSamples
// check, the step rule, nor the "hedging hurts" guard; the budget guard still
// applies when the hedge counters exist.
type Prometheus struct {
	api     v1.API
	timeout time.Duration
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
	return &Prometheus{api: v1.NewAPI(client), timeout: timeout}, nil
}

// Estimate implements Estimator. Metric outages come back as a Result with
// Derived false; the only error is an *InvalidQueryError.
func (p *Prometheus) Estimate(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, error) {
	spec := &policy.Spec
	if spec.EffectiveDelayMode() == tailcutv1alpha1.DelayModeStatic {
		res := Static(spec)
		record(policy, res, "")
		return res, nil
	}
	auto := spec.EffectiveAuto()
	qs, err := buildQueries(policy, &auto)
	if err != nil {
		record(policy, Result{}, tailcutv1alpha1.ReasonInvalidQuery)
		return Result{}, err
	}
	r := p.read(ctx, policy, &auto, qs, now)
	res := decide(policy, &auto, r, now)
	failed := ""
	if r.fail != nil {
		failed = r.fail.reason
	}
	record(policy, res, failed)
	return res, nil
}

// read sends the policy's queries at time now and checks what came back.
func (p *Prometheus) read(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, qs querySet, now time.Time) readings {
	type answer struct {
		v   model.Value
		err error
	}
	queries := []string{qs.quantile, qs.buckets, qs.count, qs.retries, qs.attempts}
	answers := make([]answer, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		if q == "" {
			continue
		}
		wg.Go(func() {
			v, err := p.query(ctx, q, now)
			answers[i] = answer{v, err}
		})
	}
	wg.Wait()
	quantileA, bucketsA, countA, retriesA, attemptsA := answers[0], answers[1], answers[2], answers[3], answers[4]

	var r readings
	r.hedge, r.hedgeNote = p.hedge(qs, retriesA.v, retriesA.err, attemptsA.v, attemptsA.err)

	// The delay path, each check in the order a human would look.
	for _, a := range []struct {
		what string
		ans  answer
		used bool
	}{{"quantile", quantileA, true}, {"count", countA, qs.count != ""}, {"bucket", bucketsA, qs.buckets != ""}} {
		if a.used && a.ans.err != nil {
			r.fail = classify(a.ans.err, a.what, p.timeout)
			return r
		}
	}
	if qs.count != "" {
		n, nd := single(countA.v, "count")
		if nd == nil && math.IsNaN(n) {
			nd = newNoData(tailcutv1alpha1.ReasonNoData, "count query returned NaN")
		}
		if nd != nil {
			r.fail = nd
			return r
		}
		r.samples, r.hasSamples = n, true
		if n < float64(auto.MinSamples) {
			r.fail = newNoData(tailcutv1alpha1.ReasonTooFewSamples, "%.0f requests in the last %s, fewer than minSamples %d",
				n, promDuration(auto.Window.Duration), auto.MinSamples)
			return r
		}
	}
	q, nd := single(quantileA.v, "quantile")
	if nd == nil {
		nd = checkQuantile(q, auto.Max.Duration)
	}
	r.quantile = q
	if nd != nil {
		r.fail = nd
		return r
	}
	if qs.buckets != "" {
		c, nd := bucketCDF(bucketsA.v, qs.boundScale, "bucket")
		if nd != nil {
			r.fail = nd
			return r
		}
		r.cdf = c
	}

	// The previous window is needed only by the "hedging hurts" guard, which
	// looks only while hedging runs and sends a real share of extra requests.
	budget := float64(policy.Spec.EffectiveBudget().MaxExtraLoadPercent)
	if qs.prevBuckets != "" && r.hedge != nil && r.hedge.percent() >= hurtsMinShare*budget && policy.Status.EffectiveDelay != nil {
		if v, err := p.query(ctx, qs.prevBuckets, now); err == nil {
			if c, nd := bucketCDF(v, qs.boundScale, "previous-window bucket"); nd == nil {
				r.prev = c
			}
		}
	}
	return r
}

// hedge reads the hedge counters. Their absence is normal (nothing hedged yet,
// or not published through tailcut's xDS), so it only disables the budget and
// "hedging hurts" guards.
func (p *Prometheus) hedge(qs querySet, rv model.Value, rerr error, av model.Value, aerr error) (*hedgeReading, string) {
	if qs.retries == "" {
		return nil, "no hedge counters for this publish target"
	}
	if rerr != nil {
		return nil, classify(rerr, "retry", p.timeout).msg
	}
	if aerr != nil {
		return nil, classify(aerr, "request", p.timeout).msg
	}
	retries, nd := single(rv, "retry")
	if nd != nil {
		return nil, nd.msg
	}
	attempts, nd := single(av, "request")
	if nd != nil {
		return nil, nd.msg
	}
	requests := attempts - retries
	if math.IsNaN(retries) || math.IsNaN(attempts) || retries < 0 || requests <= 0 {
		return nil, fmt.Sprintf("no requests on the hedged cluster in the window (%.0f attempts, %.0f retries)", attempts, retries)
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
