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
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
)

// envoyModel is what tailcut's Envoy exports for one hedged route, scraped by a
// Prometheus, in virtual time. It reproduces the data path, not the estimator:
//   - a request whose first attempt T1 outlasts the delay c gets a hedge after
//     a back-off of up to 1ms; the response is the first of T1 and c+backoff+T2;
//   - upstream_rq_total counts every attempt, upstream_rq_retry every hedge;
//     counters are live;
//   - upstream_rq_time records the response's latency once per request,
//     measured from the request's start (a request hedged at 20ms whose 16ms
//     hedge won recorded 36-37ms in Envoy 1.40), in whole milliseconds
//     (truncated), into Envoy's circllhist; a bucket le=b counts every bin
//     whose lower edge, computed as (m/10)*10^e for the bin's two-digit
//     mantissa m, is at most b. TestEnvoyModelBuckets pins this to what Envoy
//     1.40 printed for requests of known latency;
//   - histograms are published only at a stats flush: tailcut's bootstrap
//     flushes when the admin interface is read (stats_flush_on_admin), after
//     answering, so a scrape shows the histogram as of the scrape before;
//     an Istio sidecar (sidecarFlush) flushes every 5s;
//   - with an account, a slow request is hedged only when its hedge fits in
//     the hedge account (hedgeAccount); one held back is counted nowhere.
//
// Buckets are the bootstrap's (envoyconf.LatencyBucketsMs).
type envoyModel struct {
	cluster     string
	bounds      []float64 // ms, ascending, without +Inf
	scrapeEvery time.Duration
	account     *hedgeAccount // nil: no account, as on an Istio sidecar
	// sidecarFlush publishes histograms every flushEvery instead of at
	// each scrape.
	sidecarFlush bool

	inBin             []float64 // requests by first bucket that counts them; last is +Inf only
	flushed           []float64 // inBin as of the last stats flush
	nextFlush         time.Time
	retries, attempts float64
	scrapes           []scrape
	nextScrape        time.Time
}

// flushEvery is Envoy's default stats_flush_interval.
const flushEvery = 5 * time.Second

type scrape struct {
	at                time.Time
	cum               []float64 // cumulative per bound, then +Inf
	retries, attempts float64
}

func newEnvoyModel(cluster string, start time.Time) *envoyModel {
	return &envoyModel{cluster: cluster, bounds: envoyconf.LatencyBucketsMs, scrapeEvery: 2 * time.Second,
		inBin: make([]float64, len(envoyconf.LatencyBucketsMs)+1), flushed: make([]float64, len(envoyconf.LatencyBucketsMs)+1),
		nextScrape: start, nextFlush: start}
}

// binLowerEdge is the lower edge circllhist gives a whole-millisecond value.
func binLowerEdge(v int) float64 {
	if v <= 0 {
		return 0
	}
	e := int(math.Floor(math.Log10(float64(v)))) // v = m * 10^(e-1), m two digits
	m := v
	for m >= 100 {
		m /= 10
	}
	if m < 10 {
		m *= 10
	}
	return float64(m) / 10 * math.Pow(10, float64(e))
}

// record adds one request that arrived at t. firstAttempt is T1 in ms,
// hedgeAttempt T2, delay the hedge delay in force (0: off). It returns
// whether the request was hedged and the latency the client saw, in ms.
func (m *envoyModel) record(t time.Time, firstAttempt, hedgeAttempt, delay, backoff float64) (hedged bool, latency float64) {
	m.scrapeUntil(t)
	latency = firstAttempt
	m.attempts++
	funded, late, second := true, false, int64(0)
	if m.account != nil {
		funded, late, second = m.account.commit(t)
	}
	if late && delay > 0 {
		delay = (&plan.Hedge{Delay: time.Duration(delay * float64(time.Millisecond))}).LateDelay().Seconds() * 1000
	}
	if delay > 0 && firstAttempt > delay+backoff && funded {
		hedged = true
		m.attempts++
		m.retries++
		latency = math.Min(firstAttempt, delay+backoff+hedgeAttempt)
	}
	if funded && !hedged && m.account != nil {
		m.account.giveBackAt(t.Add(time.Duration(latency*float64(time.Millisecond))), second)
	}
	edge := binLowerEdge(int(latency))
	i, _ := slices.BinarySearchFunc(m.bounds, edge, func(b, e float64) int {
		if b < e {
			return -1
		}
		return 1
	})
	m.inBin[i]++
	return hedged, latency
}

// hedgeAccount is a model of the hedge account (controllers/envoyconf/
// hedgeaccount) for one Envoy worker with maxHedges 1, as it was before the
// stretch check of #26: the hedges committed within the last window seconds (whole
// Unix seconds) stay within ratio of the requests that arrived in them. A
// request commits its hedge when it arrives, late (plan.Hedge.LateDelay) when
// fewer than plan.HedgeLateThreshold would be left; one that is answered unhedged gives
// it back then, to its second, if that is still in the window.
type hedgeAccount struct {
	ratio               float64
	window              int64
	now                 int64
	seconds             map[int64]*accountSecond
	requests, committed float64
	pending             []giveBack
}

type accountSecond struct{ requests, committed float64 }

type giveBack struct {
	at     time.Time
	second int64
}

func newHedgeAccount(ratio float64) *hedgeAccount {
	return &hedgeAccount{ratio: ratio, window: int64(plan.HedgeWindow / time.Second), seconds: map[int64]*accountSecond{}}
}

// commit counts one request that arrived at t and says whether its hedge
// fits in the account, whether it is late, and the second it is booked in.
func (a *hedgeAccount) commit(t time.Time) (funded, late bool, second int64) {
	if s := t.Unix(); s > a.now {
		for old, sec := range a.seconds {
			if old <= s-a.window {
				a.requests -= sec.requests
				a.committed -= sec.committed
				delete(a.seconds, old)
			}
		}
		a.now = s
	}
	kept := a.pending[:0]
	for _, g := range a.pending {
		if g.at.After(t) {
			kept = append(kept, g)
			continue
		}
		if sec, ok := a.seconds[g.second]; ok {
			sec.committed--
			a.committed--
		}
	}
	a.pending = kept
	sec := a.seconds[a.now]
	if sec == nil {
		sec = &accountSecond{}
		a.seconds[a.now] = sec
	}
	sec.requests++
	a.requests++
	left := a.ratio*a.requests - a.committed
	if left < 1 {
		return false, false, a.now
	}
	sec.committed++
	a.committed++
	return true, left-plan.HedgeLateThreshold < 1, a.now
}

// giveBackAt returns the hedge committed in second s when the unhedged
// answer comes at t.
func (a *hedgeAccount) giveBackAt(t time.Time, s int64) {
	a.pending = append(a.pending, giveBack{at: t, second: s})
}

// scrapeUntil takes every stats flush and scrape due at or before t.
func (m *envoyModel) scrapeUntil(t time.Time) {
	for !m.nextScrape.After(t) {
		m.scrapes = append(m.scrapes, m.view(m.nextScrape))
		m.nextScrape = m.nextScrape.Add(m.scrapeEvery)
	}
}

// view is what Envoy's /stats/prometheus shows at t: the histogram as of the
// last stats flush, cumulative per bound, and the live counters.
func (m *envoyModel) view(t time.Time) scrape {
	for m.sidecarFlush && !m.nextFlush.After(t) {
		copy(m.flushed, m.inBin)
		m.nextFlush = m.nextFlush.Add(flushEvery)
	}
	s := scrape{at: t, cum: make([]float64, len(m.flushed)), retries: m.retries, attempts: m.attempts}
	sum := 0.0
	for i, n := range m.flushed {
		sum += n
		s.cum[i] = sum
	}
	if !m.sidecarFlush {
		copy(m.flushed, m.inBin)
	}
	return s
}

// simProm answers the estimator's queries from an envoyModel. It implements
// the one method of v1.API the estimator calls; the queries are parsed with
// Prometheus' own parser, and increase() follows Prometheus 2.x
// (extrapolatedRate): no result with fewer than two samples in the range,
// otherwise the growth between the first and last sample, extrapolated toward
// the range's ends by at most half a scrape interval unless a sample lies
// within 1.1 intervals of the end, and never back past zero.
type simProm struct {
	v1.API
	t     *testing.T
	model *envoyModel
	mu    sync.Mutex // the sampler sends its queries at once
	seen  []string
}

func (s *simProm) Query(_ context.Context, q string, ts time.Time, _ ...v1.Option) (model.Value, v1.Warnings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, q)
	s.model.scrapeUntil(ts)
	if perEndpointQuery(q) {
		return model.Vector{}, nil, nil
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		s.t.Fatalf("simProm: %q: %v", q, err)
	}
	if vs, ok := expr.(*parser.VectorSelector); ok {
		return s.totals(vs, ts), nil, nil
	}
	if agg, ok := expr.(*parser.AggregateExpr); ok {
		if vs, ok := agg.Expr.(*parser.VectorSelector); ok {
			return s.totals(vs, ts), nil, nil
		}
		if call, ok := agg.Expr.(*parser.Call); ok && call.Func.Name == "timestamp" {
			return s.scrapedAt(call.Args[0].(*parser.VectorSelector), ts), nil, nil
		}
	}
	agg, ok := expr.(*parser.AggregateExpr)
	call, ok2 := func() (*parser.Call, bool) {
		if !ok {
			return nil, false
		}
		c, ok := agg.Expr.(*parser.Call)
		return c, ok
	}()
	if !ok || !ok2 || agg.Op != parser.SUM || call.Func.Name != "increase" {
		s.t.Fatalf("simProm: query shape not modelled: %q", q)
	}
	ms := call.Args[0].(*parser.MatrixSelector)
	vs := ms.VectorSelector.(*parser.VectorSelector)
	for _, lm := range vs.LabelMatchers {
		if lm.Name == envoyClusterLabel && (lm.Type != labels.MatchEqual || lm.Value != s.model.cluster) {
			// Anything else, the bypass cluster included, has no data here.
			return model.Vector{}, nil, nil
		}
	}
	end := ts.Add(-vs.OriginalOffset)
	start := end.Add(-ms.Range)
	var in []scrape
	for _, sc := range s.model.scrapes {
		if sc.at.After(start) && !sc.at.After(end) {
			in = append(in, sc)
		}
	}
	if len(in) < 2 {
		return model.Vector{}, nil, nil
	}
	first, last := in[0], in[len(in)-1]
	sampled := last.at.Sub(first.at).Seconds()
	avg := sampled / float64(len(in)-1)
	toStart, toEnd := first.at.Sub(start).Seconds(), end.Sub(last.at).Seconds()
	if grew := last.attempts - first.attempts; grew > 0 {
		toStart = math.Min(toStart, sampled*first.attempts/grew)
	}
	if toStart >= 1.1*avg {
		toStart = avg / 2
	}
	if toEnd >= 1.1*avg {
		toEnd = avg / 2
	}
	scale := (sampled + toStart + toEnd) / sampled
	at := model.TimeFromUnixNano(ts.UnixNano())
	switch vs.Name {
	case "envoy_cluster_upstream_rq_retry":
		return model.Vector{{Value: model.SampleValue((last.retries - first.retries) * scale), Timestamp: at}}, nil, nil
	case "envoy_cluster_upstream_rq_total":
		return model.Vector{{Value: model.SampleValue((last.attempts - first.attempts) * scale), Timestamp: at}}, nil, nil
	case "envoy_cluster_upstream_rq_time_bucket":
		var vec model.Vector
		for i := range last.cum {
			le := "+Inf"
			if i < len(s.model.bounds) {
				le = strconv.FormatFloat(s.model.bounds[i], 'f', -1, 64)
			}
			vec = append(vec, &model.Sample{Metric: model.Metric{model.BucketLabel: model.LabelValue(le)},
				Value: model.SampleValue((last.cum[i] - first.cum[i]) * scale), Timestamp: at})
		}
		return vec, nil, nil
	}
	s.t.Fatalf("simProm: metric not modelled: %q", q)
	return nil, nil, nil
}

// lastScrape is the model's last scrape at or before ts, if vs selects its
// cluster.
func (s *simProm) lastScrape(vs *parser.VectorSelector, ts time.Time) *scrape {
	for _, lm := range vs.LabelMatchers {
		if lm.Name == envoyClusterLabel && !lm.Matches(s.model.cluster) {
			return nil
		}
	}
	var last *scrape
	for i := range s.model.scrapes {
		if !s.model.scrapes[i].at.After(ts) {
			last = &s.model.scrapes[i]
		}
	}
	return last
}

// scrapedAt answers timestamp(vs): when the last scrape happened.
func (s *simProm) scrapedAt(vs *parser.VectorSelector, ts time.Time) model.Vector {
	last := s.lastScrape(vs, ts)
	if last == nil {
		return model.Vector{}
	}
	return model.Vector{{Metric: model.Metric{envoyClusterLabel: model.LabelValue(s.model.cluster)},
		Value: model.SampleValue(float64(last.at.UnixMilli()) / 1000), Timestamp: model.TimeFromUnixNano(ts.UnixNano())}}
}

// totals answers the sampler's queries: the cumulative values of the last
// scrape at or before ts, of the model's one proxy, by envoy_cluster_name
// (and le).
func (s *simProm) totals(vs *parser.VectorSelector, ts time.Time) model.Vector {
	last := s.lastScrape(vs, ts)
	if last == nil {
		return model.Vector{}
	}
	at := model.TimeFromUnixNano(ts.UnixNano())
	named := func(metric string) model.Metric {
		return model.Metric{model.MetricNameLabel: model.LabelValue(metric), envoyClusterLabel: model.LabelValue(s.model.cluster)}
	}
	selects := func(metric string) bool {
		if vs.Name != "" {
			return vs.Name == metric
		}
		for _, lm := range vs.LabelMatchers {
			if lm.Name == model.MetricNameLabel && !lm.Matches(metric) {
				return false
			}
		}
		return true
	}
	if selects(retryMetric) || selects(attemptMetric) {
		var vec model.Vector
		if selects(retryMetric) {
			vec = append(vec, &model.Sample{Metric: named(retryMetric), Value: model.SampleValue(last.retries), Timestamp: at})
		}
		if selects(attemptMetric) {
			vec = append(vec, &model.Sample{Metric: named(attemptMetric), Value: model.SampleValue(last.attempts), Timestamp: at})
		}
		return vec
	}
	switch vs.Name {
	case "envoy_cluster_upstream_rq_time_bucket":
		var vec model.Vector
		for i := range last.cum {
			le := "+Inf"
			if i < len(s.model.bounds) {
				le = strconv.FormatFloat(s.model.bounds[i], 'f', -1, 64)
			}
			vec = append(vec, &model.Sample{Metric: model.Metric{model.MetricNameLabel: "envoy_cluster_upstream_rq_time_bucket", envoyClusterLabel: model.LabelValue(s.model.cluster), model.BucketLabel: model.LabelValue(le)},
				Value: model.SampleValue(last.cum[i]), Timestamp: at})
		}
		return vec
	}
	s.t.Fatalf("simProm: metric not modelled: %s", vs.Name)
	return nil
}

// TestEnvoyModelBuckets pins the model to Envoy 1.40: requests of a known
// latency, sent through a real Envoy with these buckets, showed up first in
// these buckets (the backend slept the time given; Envoy measured a few tenths
// of a millisecond more).
func TestEnvoyModelBuckets(t *testing.T) {
	for _, tc := range []struct {
		measuredMS float64 // what Envoy's upstream_rq_time saw, backend sleep + overhead
		firstLE    float64
	}{
		{11.5, 11}, {13.5, 13}, {15.5, 15}, {17.5, 17}, {19.5, 19}, {104.7, 100},
		// 112ms is in bin [110,120), whose lower edge is 1.1*100 = 110.00000000000001.
		{112.2, 111},
	} {
		m := &envoyModel{bounds: []float64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 100, 110, 111, 120}, scrapeEvery: time.Hour}
		m.inBin = make([]float64, len(m.bounds)+1)
		m.record(time.Time{}, tc.measuredMS, 0, 0, 0)
		i := slices.Index(m.inBin, 1)
		if i >= len(m.bounds) || m.bounds[i] != tc.firstLE {
			t.Errorf("%.1fms: first counted in bucket %d, want le=%g", tc.measuredMS, i, tc.firstLE)
		}
	}
	// And the estimator reads those buckets with the matching edge.
	for _, tc := range []struct{ bound, edge float64 }{{16, 17}, {99, 100}, {100, 110}, {111, 120}, {750, 760}, {1000, 1100}} {
		if got := envoyEdge(tc.bound/1000) * 1000; math.Abs(got-tc.edge) > 1e-9 {
			t.Errorf("envoyEdge(%gms) = %gms, want %gms", tc.bound, got, tc.edge)
		}
	}
}

// latencyModel draws one attempt's latency in ms at time t.
type latencyModel func(t time.Duration, rng *rand.Rand) float64

// bimodalMS is a fast mode of base plus a small, skewed jitter (what a Go
// server sleeping base shows through Envoy), and slowShare of requests 100ms
// slower, independently per attempt.
func bimodalMS(base, slowShare float64) latencyModel {
	return func(_ time.Duration, rng *rand.Rand) float64 {
		v := base + 0.1 + 0.3*rng.ExpFloat64()
		if rng.Float64() < slowShare {
			v += 100
		}
		return v
	}
}

func lognormalMS(median, sigma float64) latencyModel {
	return func(_ time.Duration, rng *rand.Rand) float64 { return median * math.Exp(sigma*rng.NormFloat64()) }
}

// shiftMS runs before, then after from from to until, then before again.
func shiftMS(before, after latencyModel, from, until time.Duration) latencyModel {
	return func(t time.Duration, rng *rand.Rand) float64 {
		if t >= from && t < until {
			return after(t, rng)
		}
		return before(t, rng)
	}
}
