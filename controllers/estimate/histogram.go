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
	"errors"
	"math"
	"slices"
	"sort"
)

// How the delay is read from a latency histogram.
//
// With one hedge at delay d and attempts that are slow independently, the extra
// load is S(d), the share of requests slower than d. Under an extra-load budget B
// the best delay is the shortest d with S(d) <= B: the (1-B) quantile (Finagle's
// BackupRequestFilter rule). tailcut looks for the shortest delay whose measured
// tail is at most tau*(1+budgetSlack), tau = 1 - max(quantile, 1-B), and adds
// delayMargin on top (see decide.go for both).
//
// Reading S(d) honestly takes two corrections.
//
// Bucket edges. A bucket le=b does not always mean "at most b". Envoy records
// upstream_rq_time in whole milliseconds, truncated, into a log-linear histogram
// (circllhist) whose bins keep two significant digits, and a bucket le=b counts
// every bin that starts at or below b. Measured with Envoy 1.40: requests of
// 15.3ms land in le="15", of 104.5ms in le="100", of 112ms in le="111". So le=b
// holds requests up to one bin above b: everything faster than 17ms for b=16,
// faster than 110ms for b=100. A delay read at bound b is only safe at
// edge(b), the bin's upper end. Read at b itself, a fast mode at 16.1-16.9ms
// looks like "5% slower than 16ms" while half the requests are.
//
// Censoring. On the hedged route Envoy records one latency per request: the
// winner's. A request whose first attempt is slower than the delay c is hedged
// and records at least c, so below c the histogram is exact (those requests
// were never hedged) and above c it is too short. A delay is therefore read only
// from bounds whose edge is at most c. When none qualifies, the quantile lies at
// or above c; the hedged histogram then still gives a lower bound for it, since
// a hedged request is never slower than its first attempt.

// cdf is a latency histogram read from Prometheus over one range: cumulative
// request counts at increasing upper bounds in seconds, the last bound +Inf.
type cdf struct {
	bounds []float64
	cum    []float64
}

var (
	errNoInfBucket = errors.New("histogram has no +Inf bucket")
	errBadBucket   = errors.New("histogram has a NaN or negative bucket count")
	errEmptyCDF    = errors.New("histogram has no requests in the range")
)

// newCDF builds a cdf from (upper bound in seconds, cumulative count) points.
// Counts are made non-decreasing, as histogram_quantile does, because
// increase() extrapolates each bucket separately.
func newCDF(points map[float64]float64) (*cdf, error) {
	bounds := make([]float64, 0, len(points))
	for b, n := range points {
		if math.IsNaN(n) || n < 0 || math.IsNaN(b) {
			return nil, errBadBucket
		}
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || !math.IsInf(bounds[len(bounds)-1], 1) {
		return nil, errNoInfBucket
	}
	c := &cdf{bounds: bounds, cum: make([]float64, len(bounds))}
	for i, b := range bounds {
		c.cum[i] = points[b]
		if i > 0 && c.cum[i] < c.cum[i-1] {
			c.cum[i] = c.cum[i-1]
		}
	}
	if c.total() <= 0 {
		return nil, errEmptyCDF
	}
	return c, nil
}

// total is the number of requests in the range.
func (c *cdf) total() float64 { return c.cum[len(c.cum)-1] }

// quantile follows Prometheus' histogram_quantile: linear interpolation inside
// the bucket that holds the rank, 0 as the lower edge of the first bucket, and
// the highest finite bound when the rank falls in the +Inf bucket. It serves
// the "hedging hurts" guard, which compares medians of two ranges read the same
// way; delays are read with choose.
func (c *cdf) quantile(q float64) float64 {
	rank := q * c.total()
	i := sort.Search(len(c.cum), func(i int) bool { return c.cum[i] >= rank })
	if i >= len(c.bounds)-1 {
		if len(c.bounds) < 2 {
			return math.Inf(1)
		}
		return c.bounds[len(c.bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = c.bounds[i-1], c.cum[i-1]
	}
	upper := c.bounds[i]
	if i == 0 && upper <= 0 {
		return upper
	}
	in := c.cum[i] - below
	if in <= 0 {
		return upper
	}
	return lower + (upper-lower)*(rank-below)/in
}

// bucketEdge maps a bucket bound to the latency below which the bucket is
// guaranteed to hold every request, both in seconds.
type bucketEdge func(bound float64) float64

// exactEdge is the edge of a histogram that counts "at most b", like
// client_golang's.
func exactEdge(b float64) float64 { return b }

// envoyEdge is the edge of Envoy's upstream_rq_time buckets (bounds in
// seconds): the end of the circllhist bin the bound falls in, for whole
// milliseconds. Two significant digits make bins 1ms wide below 100ms, 10ms
// wide below 1s, and so on.
func envoyEdge(b float64) float64 {
	// Bounds come in seconds (le / 1000); undo the float error of that division
	// (0.13 * 1000 is 129.99999999999997) before taking the bin.
	ms := math.Round(b*1e9) / 1e6
	width := 1.0
	if ms >= 100 {
		width = math.Pow(10, math.Floor(math.Log10(ms))-1)
	}
	return (math.Floor(ms/width) + 1) * width / 1000
}

// shortest reads the shortest delay d = edge(b) whose measured tail is at most
// allowed, and that tail: the quantile 1-allowed, read conservatively. ok is
// false when only the +Inf bucket qualifies. With hedging in force at delay c,
// d is exact when d <= c and a lower bound of the quantile otherwise.
func (c *cdf) shortest(allowed float64, edge bucketEdge) (d, tail float64, ok bool) {
	n := c.total()
	for i, b := range c.bounds {
		if math.IsInf(b, 1) {
			break
		}
		if tail := 1 - c.cum[i]/n; tail <= allowed {
			return edge(b), tail, true
		}
	}
	return 0, 0, false
}

// fastest is a latency that almost no request beat: the lower bound of the
// bucket in which fastestShare of the requests is reached. A hedge sent at
// delay c answers no sooner than c + fastest, so a histogram of hedged
// latencies is exact below that, not only below c: past it, hedges' answers
// hide how slow their requests were.
func (c *cdf) fastest() float64 {
	n := c.total()
	for i := range c.bounds {
		if c.cum[i] >= fastestShare*n {
			if i == 0 || math.IsInf(c.bounds[i], 1) {
				return 0
			}
			return c.bounds[i-1]
		}
	}
	return 0
}

// fastestShare is the share of requests fastest lets be faster than it.
const fastestShare = 0.001

// beyond is the share of requests the histogram proves slower than c
// seconds: those outside the first bucket whose edge is at or past c (a
// bucket le=b holds the requests faster than edge(b)). With hedging at delay
// c, every one of them ran past the delay, hedged or not: this is, counted
// low, what the delay asks of the hedge account. Linear interpolation inside
// the bucket would count high just above a fast mode, whose tail falls
// steeply there (it read 7.7% for 5% at 45.1ms in the closed loop).
func (c *cdf) beyond(seconds float64, edge bucketEdge) float64 {
	for i, b := range c.bounds {
		if math.IsInf(b, 1) || edge(b) >= seconds*(1-1e-9) {
			return 1 - c.cum[i]/c.total()
		}
	}
	return 0
}

// notProvenFaster is the share of requests the histogram does not prove
// faster than seconds: beyond counted high, every bucket that may hold a
// request that slow.
func (c *cdf) notProvenFaster(seconds float64, edge bucketEdge) float64 {
	faster := 0.0
	for i, b := range c.bounds {
		if math.IsInf(b, 1) || edge(b) > seconds*(1+1e-9) {
			break
		}
		faster = c.cum[i]
	}
	return 1 - faster/c.total()
}

// plus is the histogram of the requests of c and o together; nil when their
// buckets differ (a proxy's buckets changed between the two readings).
func (c *cdf) plus(o *cdf) *cdf {
	if o == nil || !slices.Equal(c.bounds, o.bounds) {
		return nil
	}
	sum := &cdf{bounds: c.bounds, cum: make([]float64, len(c.cum))}
	for i := range c.cum {
		sum.cum[i] = c.cum[i] + o.cum[i]
	}
	return sum
}

// minus is the histogram of the requests of c that are not in o, a stretch
// of c's span; nil when their buckets differ or nothing is left. Counts are
// made non-decreasing and non-negative, as newCDF does.
func (c *cdf) minus(o *cdf) *cdf {
	if o == nil || !slices.Equal(c.bounds, o.bounds) {
		return nil
	}
	rest := &cdf{bounds: c.bounds, cum: make([]float64, len(c.cum))}
	for i := range c.cum {
		rest.cum[i] = math.Max(0, c.cum[i]-o.cum[i])
		if i > 0 && rest.cum[i] < rest.cum[i-1] {
			rest.cum[i] = rest.cum[i-1]
		}
	}
	if rest.total() <= 0 {
		return nil
	}
	return rest
}
