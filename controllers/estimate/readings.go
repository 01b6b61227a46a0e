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
	"net/url"
	"strconv"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Limits beyond which a quantile is not believed: a hedge delay of a minute is
// never what anyone wants, and a quantile ten times above max means the data
// or the query is wrong rather than that the service got slower.
const (
	absurdSeconds = 60.0
	absurdFactor  = 10.0
)

// noData is one named reason why no trustworthy delay could be read.
type noData struct {
	reason string
	msg    string
}

func (n *noData) Error() string { return n.reason + ": " + n.msg }

func newNoData(reason, format string, args ...any) *noData {
	return &noData{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// hedgeReading is the hedged cluster's counters over the read span.
type hedgeReading struct {
	// retries counts the extra attempts: hedges and retries, which Envoy counts
	// together as upstream_rq_retry.
	retries float64
	// requests counts the original requests: upstream_rq_total counts every
	// attempt, so requests = upstream_rq_total - upstream_rq_retry.
	requests float64
}

// percent is the extra requests as a percentage of requests.
func (h *hedgeReading) percent() float64 { return 100 * h.retries / h.requests }

// over reports whether the hedge rate is above the budget by more than
// budgetSlack and by more than sampling noise: a one-sided test at overZ
// standard errors of a binomial share at that limit. With a 5% budget the
// limit is 5.25%, and a rate counts as over above 6.9% at 750 requests, 5.9%
// at 5,000 and 5.6% at 18,000: a run of a few thousand requests stays within
// the budget + 1 point.
func (h *hedgeReading) over(budgetPercent int32) bool {
	return overBudget(h.retries/h.requests, h.requests, budgetPercent)
}

// overBudget is the test of over for a share measured over n requests.
func overBudget(share, n float64, budgetPercent int32) bool {
	if n <= 0 {
		return false
	}
	limit := float64(budgetPercent) / 100 * (1 + budgetSlack)
	se := math.Sqrt(limit * (1 - limit) / n)
	return share > limit+overZ*se
}

// overWithoutOnePart says whether the share of requests past d seconds is
// over the budget in the span's parts even without the part with the most
// of them: a reading whose breach rests on one tick's scrapes is a burst,
// not the delay's cost. Requests slow together (a CPU stall, a GC pause, the
// evaluation's own work on a busy node) are not independent draws, and the
// binomial test of overBudget counts them as if they were: beside two busy
// loops the local stack read 25 of 290 requests past 25.3ms in one tick
// (8.6%, over at 290), where the ticks around it read 3-5%. A reading read
// whole (no parts) is judged whole.
func (r *readings) overWithoutOnePart(d float64, budgetPercent int32) bool {
	if r.parts == nil {
		return true
	}
	var past, total, worstPast, worstTotal float64
	for _, c := range r.parts {
		p := c.beyond(d, r.edge) * c.total()
		past, total = past+p, total+c.total()
		if p > worstPast {
			worstPast, worstTotal = p, c.total()
		}
	}
	rest := total - worstTotal
	return rest > 0 && overBudget((past-worstPast)/rest, rest, budgetPercent)
}

// readings is everything one evaluation read from Prometheus.
type readings struct {
	// fail is the first reason the delay path has no trustworthy data; when it
	// is set the fields below it may be partly filled.
	fail *noData
	// thin, when set, says why the histogram is too thin to read a delay from
	// (fewer than minSamples requests since the last change); the hedge
	// counters still count.
	thin string
	// cdf is the latency histogram over the span (nil for Custom) and edge how
	// far above its bounds its buckets reach; samples is its request count.
	cdf     *cdf
	edge    bucketEdge
	samples float64
	// quantile is the Custom query's value in seconds.
	quantile float64
	// prev is the histogram of the window that ended one window ago (for
	// the "hedging hurts" guard), last the one of the last evaluation
	// interval and earlier the one of the interval before it (recent.go);
	// each nil when it could not be read.
	prev, last, earlier *cdf
	// parts are the span's histogram between each two of the sampler's
	// ticks in it, nil when the span was read whole (a policy's own
	// queries): overWithoutOnePart.
	parts []*cdf
	// hedge is nil when the hedge counters are absent or could not be read;
	// hedgeNote then says why.
	hedge     *hedgeReading
	hedgeNote string
}

// classify names a failed query. client_golang returns a *v1.Error for HTTP
// and API errors, a *url.Error for transport failures, the context's error
// when the deadline passed, and a plain decoding error for a body it could not
// read.
func classify(err error, what string, timeout time.Duration) *noData {
	var apiErr *v1.Error
	var urlErr *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &apiErr) && apiErr.Type == v1.ErrTimeout):
		return newNoData(tailcutv1alpha1.ReasonQueryTimeout, "%s query got no answer within %s", what, timeout)
	case errors.As(err, &apiErr) && (apiErr.Type == v1.ErrServer || apiErr.Type == v1.ErrClient):
		return newNoData(tailcutv1alpha1.ReasonPrometheusHTTPError, "%s query: Prometheus answered %s", what, apiErr.Msg)
	case errors.As(err, &apiErr) && apiErr.Type == v1.ErrBadResponse:
		return newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query: unreadable answer: %s", what, clip(apiErr.Msg))
	case errors.As(err, &apiErr):
		return newNoData(tailcutv1alpha1.ReasonQueryFailed, "%s query: Prometheus rejected it (%s): %s", what, apiErr.Type, clip(apiErr.Msg))
	case errors.As(err, &urlErr) || errors.Is(err, context.Canceled):
		return newNoData(tailcutv1alpha1.ReasonQueryFailed, "%s query failed: %s", what, clip(err.Error()))
	default:
		return newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query: unreadable answer: %s", what, clip(err.Error()))
	}
}

// clip keeps error text short enough for a one-line status reason.
func clip(s string) string {
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return s
}

// single reads the one value of a query that must return one series.
func single(v model.Value, what string) (float64, *noData) {
	switch v := v.(type) {
	case model.Vector:
		switch len(v) {
		case 0:
			return 0, newNoData(tailcutv1alpha1.ReasonNoData, "%s query returned no series", what)
		case 1:
			return float64(v[0].Value), nil
		default:
			return 0, newNoData(tailcutv1alpha1.ReasonMultipleSeries, "%s query returned %d series, want 1 (first %s)", what, len(v), v[0].Metric)
		}
	case *model.Scalar:
		return float64(v.Value), nil
	case nil:
		return 0, newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query returned no result", what)
	default:
		return 0, newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query returned a %s, want a vector", what, v.Type())
	}
}

// checkQuantile rejects values no delay can be derived from.
func checkQuantile(q float64, maxDelay time.Duration) *noData {
	switch {
	case math.IsNaN(q):
		return newNoData(tailcutv1alpha1.ReasonQuantileNaN, "the quantile is NaN (no requests in the window?)")
	case math.IsInf(q, 1):
		return newNoData(tailcutv1alpha1.ReasonQuantileInfinite, "the quantile is +Inf (it lies in the +Inf bucket)")
	case q < 0:
		return newNoData(tailcutv1alpha1.ReasonQuantileNegative, "the quantile is negative (%g s)", q)
	case q > absurdSeconds || q > absurdFactor*maxDelay.Seconds():
		return newNoData(tailcutv1alpha1.ReasonQuantileAbsurd, "the quantile %s is above %gs or %g times max (%s)",
			secondsToDuration(q), absurdSeconds, absurdFactor, maxDelay)
	}
	return nil
}

// bucketCDF reads a "sum by (le)" answer into a cdf with bounds in seconds.
func bucketCDF(v model.Value, scale float64, what string) (*cdf, *noData) {
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query returned %v, want a vector", what, typeOf(v))
	}
	if len(vec) == 0 {
		return nil, newNoData(tailcutv1alpha1.ReasonNoData,
			"%s query returned no series: the route has served no request since Envoy started, or Prometheus does not scrape Envoy", what)
	}
	points := make(map[float64]float64, len(vec))
	for _, s := range vec {
		le, ok := s.Metric[model.BucketLabel]
		if !ok {
			return nil, newNoData(tailcutv1alpha1.ReasonMultipleSeries, "%s query returned series %s without an le label", what, s.Metric)
		}
		b, err := strconv.ParseFloat(string(le), 64)
		if err != nil {
			return nil, newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query: bad le %q", what, le)
		}
		if _, dup := points[b*scale]; dup {
			return nil, newNoData(tailcutv1alpha1.ReasonMultipleSeries, "%s query returned le=%q twice", what, le)
		}
		points[b*scale] = float64(s.Value)
	}
	c, err := newCDF(points)
	switch {
	case errors.Is(err, errEmptyCDF):
		return nil, newNoData(tailcutv1alpha1.ReasonNoTraffic, "%s query: %v", what, err)
	case err != nil:
		return nil, newNoData(tailcutv1alpha1.ReasonBadResponse, "%s query: %v", what, err)
	}
	return c, nil
}

func typeOf(v model.Value) string {
	if v == nil {
		return "nothing"
	}
	return "a " + v.Type().String()
}

func secondsToDuration(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) || s > math.MaxInt64/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}
