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
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/test/harness"
)

// A fake Prometheus query API: each query is told apart by its shape and
// answered from a table, so a test sets exactly what Prometheus "says".

type queryKind string

const (
	kQuantile queryKind = "quantile" // a Custom query
	kBuckets  queryKind = "buckets"  // the span's histogram
	kRecent   queryKind = "recent"   // the last two intervals' (30s each); kBuckets' reply when unset
	kPrev     queryKind = "prev"
	kRetries  queryKind = "retries"
	kAttempts queryKind = "attempts"
)

func kindOf(q string) queryKind {
	switch {
	case strings.Contains(q, " offset ") && !strings.Contains(q, "[30s] offset 30s"):
		// The previous window; "[30s] offset 30s" is the interval before the
		// last (test policies evaluate every 30s), answered like the others.
		return kPrev
	case strings.HasPrefix(q, "sum by (le)") && strings.Contains(q, "[30s]"):
		return kRecent
	case strings.HasPrefix(q, "sum by (le)"):
		return kBuckets
	case strings.Contains(q, "upstream_rq_retry"):
		return kRetries
	case strings.Contains(q, "upstream_rq_total"):
		return kAttempts
	default:
		return kQuantile
	}
}

// The replies and their bodies are the harness's.
type (
	reply  = harness.PromReply
	sample = harness.PromSample
)

var (
	vectorJSON = harness.PromVector
	promFloat  = harness.PromFloat
)

// fakeProm is the harness's fake Prometheus, answering each kind of query
// from a table; a kind not in the table gets an empty vector.
type fakeProm struct {
	*harness.FakePrometheus
	mu      sync.Mutex
	replies map[queryKind]reply
}

func newFakeProm(t testing.TB) *fakeProm {
	t.Helper()
	f := &fakeProm{replies: map[queryKind]reply{}}
	f.FakePrometheus = harness.NewFakePrometheus(func(q string) reply {
		f.mu.Lock()
		defer f.mu.Unlock()
		k := kindOf(q)
		if _, ok := f.replies[k]; !ok && k == kRecent {
			k = kBuckets
		}
		if rep, ok := f.replies[k]; ok {
			return rep
		}
		return reply{Body: vectorJSON()}
	})
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProm) set(k queryKind, r reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[k] = r
}

func (f *fakeProm) queries() []string { return f.Queries() }

func one(v float64) reply { return reply{Body: vectorJSON(sample{Value: v})} }

// bucketsReply renders n requests distributed by the CDF F (of milliseconds)
// as Envoy's "sum by (le)" answer: a bucket le=b holds every request faster
// than the end of the histogram bin b falls in (envoymodel_test.go), so it
// counts n*F(edge(b)).
func bucketsReply(n float64, F func(ms float64) float64) reply {
	samples := make([]sample, 0, len(envoyconf.LatencyBucketsMs)+1)
	for _, b := range envoyconf.LatencyBucketsMs {
		samples = append(samples, sample{Labels: map[string]string{"le": promFloat(b)}, Value: math.Round(n * F(1000*envoyEdge(b/1000)))})
	}
	samples = append(samples, sample{Labels: map[string]string{"le": "+Inf"}, Value: n})
	return reply{Body: vectorJSON(samples...)}
}

// Distributions, as CDFs of milliseconds.

func normalCDF(x, mu, sigma float64) float64 { return 0.5 * math.Erfc(-(x-mu)/(sigma*math.Sqrt2)) }

// bimodal is fast ~ N(fast, 1ms) with a share slow of requests 100 ms slower.
func bimodal(fast, slow float64) func(float64) float64 {
	return func(ms float64) float64 {
		return (1-slow)*normalCDF(ms, fast, 1) + slow*normalCDF(ms, fast+100, 1)
	}
}

// lognormal has the given median and shape sigma.
func lognormal(median, sigma float64) func(float64) float64 {
	return func(ms float64) float64 {
		if ms <= 0 {
			return 0
		}
		return normalCDF(math.Log(ms), math.Log(median), sigma)
	}
}

// quantileOf inverts a CDF by bisection, in ms.
func quantileOf(F func(float64) float64, q float64) float64 {
	lo, hi := 0.0, 100000.0
	for range 200 {
		mid := (lo + hi) / 2
		if F(mid) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
