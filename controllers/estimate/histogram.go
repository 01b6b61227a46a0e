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
	"sort"
)

// How the delay is chosen from the latency histogram.
//
// With one hedge at delay d and attempts that are slow independently, the extra
// load is S(d), the share of requests slower than d. Under an extra-load budget B
// the best delay is the lowest d with S(d) <= B: the (1-B) quantile (Finagle's
// BackupRequestFilter rule). tailcut targets the tail tau = 1 - max(q, 1-B): the
// configured quantile q, but never a lower one than the budget allows.
//
// A quantile that lands on a step of the distribution is unstable. With 15 ms
// fast requests and 5% of them 100 ms slower, S(d) stays at about 5% from the
// end of the fast mode to the start of the slow one, so the 0.95 quantile jumps
// between ~17 ms and ~110 ms from window to window. A delay at or above the slow
// mode can never win: the hedge would answer after the original. So after
// reading d_tau = Q(1-tau) the estimator looks below it for a step: the lowest
// bucket bound b whose measured tail S(b) is at most (1+stepTolerance)*tau. If
// d_tau >= stepRatio*b, a small allowance of extra load buys a much shorter
// delay, which only happens where the histogram has a gap, and the delay is b:
// just above the fast mode, with S(b) close to the slow share. On a smooth
// distribution b is close to d_tau (or absent) and the delay stays d_tau. The
// same allowance is the tolerance of the measured hedge rate against the budget
// (see decide), so the two rules never fight.
const (
	// stepTolerance is the extra tail share, relative to tau, accepted to step
	// below a gap.
	stepTolerance = 0.25
	// stepRatio is how much shorter the delay below a gap must be than d_tau
	// for the gap rule to apply.
	stepRatio = 1.5
)

// cdf is a latency histogram read from Prometheus over one window: cumulative
// request counts at increasing upper bounds in seconds, the last bound +Inf.
type cdf struct {
	bounds []float64
	cum    []float64
}

var (
	errNoInfBucket = errors.New("histogram has no +Inf bucket")
	errBadBucket   = errors.New("histogram has a NaN or negative bucket count")
	errEmptyCDF    = errors.New("histogram has no requests in the window")
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

// total is the number of requests in the window.
func (c *cdf) total() float64 { return c.cum[len(c.cum)-1] }

// quantile follows Prometheus' histogram_quantile: linear interpolation inside
// the bucket that holds the rank, 0 as the lower edge of the first bucket, and
// the highest finite bound when the rank falls in the +Inf bucket.
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

// tail is S(d): the share of requests slower than d, interpolated linearly
// inside a bucket like quantile.
func (c *cdf) tail(d float64) float64 {
	n := c.total()
	below, lower := 0.0, 0.0
	for i, upper := range c.bounds {
		if d <= upper {
			if math.IsInf(upper, 1) {
				return 1 - below/n
			}
			frac := 1.0
			if upper > lower {
				frac = (d - lower) / (upper - lower)
			}
			if frac < 0 {
				frac = 0
			}
			return 1 - (below+frac*(c.cum[i]-below))/n
		}
		below, lower = c.cum[i], upper
	}
	return 1 - below/n
}

// choice is the delay the histogram asks for, before clamping and stability.
type choice struct {
	// delay is the chosen delay in seconds.
	delay float64
	// atTau is d_tau, the quantile at 1 - tau.
	atTau float64
	// onStep is true when d_tau sits on a step and delay is below it.
	onStep bool
	// tail is the measured S(delay): the extra load the delay implies.
	tail float64
}

// choose applies the rule documented at the top of this file for tail share tau.
func (c *cdf) choose(tau float64) choice {
	dTau := c.quantile(1 - tau)
	ch := choice{delay: dTau, atTau: dTau, tail: c.tail(dTau)}
	limit := (1 + stepTolerance) * tau
	n := c.total()
	for i, b := range c.bounds {
		if b >= dTau || math.IsInf(b, 1) {
			break
		}
		if 1-c.cum[i]/n <= limit {
			// The lowest bound whose measured tail is within the allowance.
			if b > 0 && dTau >= stepRatio*b {
				ch.delay, ch.onStep, ch.tail = b, true, 1-c.cum[i]/n
			}
			break
		}
	}
	return ch
}
