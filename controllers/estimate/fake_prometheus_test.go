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
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/envoyconf"
)

// A fake Prometheus query API: each query is told apart by its shape and
// answered from a table, so a test sets exactly what Prometheus "says".

type queryKind string

const (
	kQuantile queryKind = "quantile" // a Custom query
	kBuckets  queryKind = "buckets"  // the span's and the last interval's histogram
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

// reply is one canned answer. hang holds the request until the client gives
// up (or a second passes), to provoke the per-query timeout.
type reply struct {
	code int
	body string
	hang bool
}

type fakeProm struct {
	t       testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	replies map[queryKind]reply
	seen    []string
}

func newFakeProm(t testing.TB) *fakeProm {
	t.Helper()
	f := &fakeProm{t: t, replies: map[queryKind]reply{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProm) set(k queryKind, r reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[k] = r
}

func (f *fakeProm) queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func (f *fakeProm) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	f.mu.Lock()
	f.seen = append(f.seen, q)
	rep, ok := f.replies[kindOf(q)]
	f.mu.Unlock()
	if !ok {
		rep = reply{body: vectorJSON()}
	}
	if rep.hang {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.code != 0 {
		w.WriteHeader(rep.code)
	}
	_, _ = w.Write([]byte(rep.body))
}

// sample is one series of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

func promFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func vectorJSON(samples ...sample) string {
	type series struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	out := make([]series, 0, len(samples))
	for _, s := range samples {
		m := s.labels
		if m == nil {
			m = map[string]string{}
		}
		out = append(out, series{Metric: m, Value: [2]any{1.7e9, promFloat(s.value)}})
	}
	b, err := json.Marshal(map[string]any{
		"status": "success",
		"data":   map[string]any{"resultType": "vector", "result": out},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func one(v float64) reply { return reply{body: vectorJSON(sample{value: v})} }

// bucketsReply renders n requests distributed by the CDF F (of milliseconds)
// as Envoy's "sum by (le)" answer: a bucket le=b holds every request faster
// than the end of the histogram bin b falls in (envoymodel_test.go), so it
// counts n*F(edge(b)).
func bucketsReply(n float64, F func(ms float64) float64) reply {
	samples := make([]sample, 0, len(envoyconf.LatencyBucketsMs)+1)
	for _, b := range envoyconf.LatencyBucketsMs {
		samples = append(samples, sample{labels: map[string]string{"le": promFloat(b)}, value: math.Round(n * F(1000*envoyEdge(b/1000)))})
	}
	samples = append(samples, sample{labels: map[string]string{"le": "+Inf"}, value: n})
	return reply{body: vectorJSON(samples...)}
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
