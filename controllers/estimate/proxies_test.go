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
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// proxyScrape is what Prometheus holds, at one moment, for one proxy (one
// scrape target) and one cluster: its cumulative counts as last scraped.
type proxyScrape struct {
	// pod names the proxy; the target labels a ServiceMonitor adds (instance,
	// pod, namespace, service, endpoint, job) follow from it.
	pod     string
	cluster string
	// requests are the original requests, retries the hedges and retries;
	// fast the requests of at most 16ms (bucket le=16).
	requests, retries, fast float64
	scraped                 time.Time
}

// labels are the proxy's series labels as Prometheus stores them.
func (p proxyScrape) labels(metric string) model.Metric {
	return model.Metric{
		model.MetricNameLabel: model.LabelValue(metric),
		envoyClusterLabel:     model.LabelValue(p.cluster),
		"instance":            model.LabelValue(fmt.Sprintf("10.0.0.%d:9901", p.pod[len(p.pod)-1])),
		"pod":                 model.LabelValue(p.pod),
		"namespace":           "tailcut-system",
		"service":             "tailcut-envoy",
		"endpoint":            "admin",
		"job":                 "tailcut-envoy",
	}
}

// seriesProm is a Prometheus that holds one proxyScrape per proxy and
// cluster and evaluates the PromQL shapes the sampler sends (a selector, sum
// or min by or without some labels, timestamp()) over their series, whatever
// the query. The sampler's queries are parsed with Prometheus' parser, so a
// test sees what a real Prometheus would answer to them.
type seriesProm struct {
	v1.API
	t     *testing.T
	mu    sync.Mutex
	state []proxyScrape
}

func (s *seriesProm) set(state ...proxyScrape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = state
}

type evalSample struct {
	metric model.Metric
	value  float64
}

func (s *seriesProm) series() []evalSample {
	var out []evalSample
	for _, p := range s.state {
		out = append(out,
			evalSample{p.labels(retryMetric), p.retries},
			evalSample{p.labels(attemptMetric), p.requests + p.retries})
		for le, v := range map[string]float64{"16": p.fast, "+Inf": p.requests} {
			m := p.labels(envoyLatencyMetric + "_bucket")
			m[model.BucketLabel] = model.LabelValue(le)
			out = append(out, evalSample{m, v})
		}
	}
	return out
}

// scrapedAt is the scrape time of the proxy a series belongs to.
func (s *seriesProm) scrapedAt(m model.Metric) time.Time {
	for _, p := range s.state {
		if string(m["pod"]) == p.pod && string(m[envoyClusterLabel]) == p.cluster {
			return p.scraped
		}
	}
	s.t.Fatalf("seriesProm: no proxy for %s", m)
	return time.Time{}
}

func (s *seriesProm) Query(_ context.Context, q string, ts time.Time, _ ...v1.Option) (model.Value, v1.Warnings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if perEndpointQuery(q) {
		return model.Vector{}, nil, nil
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		s.t.Fatalf("seriesProm: %q: %v", q, err)
	}
	var vec model.Vector
	for _, smp := range s.eval(expr, q) {
		vec = append(vec, &model.Sample{Metric: smp.metric, Value: model.SampleValue(smp.value), Timestamp: model.TimeFromUnixNano(ts.UnixNano())})
	}
	return vec, nil, nil
}

func (s *seriesProm) eval(expr parser.Expr, q string) []evalSample {
	switch e := expr.(type) {
	case *parser.ParenExpr:
		return s.eval(e.Expr, q)
	case *parser.VectorSelector:
		var out []evalSample
	series:
		for _, smp := range s.series() {
			for _, lm := range e.LabelMatchers {
				if !lm.Matches(string(smp.metric[model.LabelName(lm.Name)])) {
					continue series
				}
			}
			out = append(out, smp)
		}
		return out
	case *parser.Call:
		if e.Func.Name != "timestamp" {
			break
		}
		in := s.eval(e.Args[0], q)
		for i := range in {
			in[i].value = float64(s.scrapedAt(in[i].metric).UnixMilli()) / 1000
			in[i].metric = in[i].metric.Clone()
			delete(in[i].metric, model.MetricNameLabel)
		}
		return in
	case *parser.AggregateExpr:
		if e.Op != parser.SUM && e.Op != parser.MIN {
			break
		}
		groups := map[model.Fingerprint]*evalSample{}
		var order []model.Fingerprint
		for _, smp := range s.eval(e.Expr, q) {
			key := model.Metric{}
			for name, v := range smp.metric {
				if slices.Contains(e.Grouping, string(name)) != e.Without && (!e.Without || name != model.MetricNameLabel) {
					key[name] = v
				}
			}
			fp := key.Fingerprint()
			g, ok := groups[fp]
			switch {
			case !ok:
				groups[fp] = &evalSample{key, smp.value}
				order = append(order, fp)
			case e.Op == parser.SUM:
				g.value += smp.value
			default:
				g.value = min(g.value, smp.value)
			}
		}
		out := make([]evalSample, 0, len(order))
		for _, fp := range order {
			out = append(out, *groups[fp])
		}
		return out
	}
	s.t.Fatalf("seriesProm: query shape not modelled: %q", q)
	return nil
}

// proxy is one proxy's counts at a tick, for TestSamplerCountsEachProxy:
// requests and retries; 90% of the requests were fast.
func proxy(pod string, requests, retries float64) proxyScrape {
	return proxyScrape{pod: pod, requests: requests, retries: retries, fast: 0.9 * requests}
}

// TestSamplerCountsEachProxy: the chart runs two proxies, and a reading sums
// what each of them counted. The sampler summed them in PromQL and took any
// fall of the sum for a reset: when one proxy restarted, stopped, or missed
// a scrape, a whole lifetime of the other's counts, censored at old delays,
// entered the reading (with two real Envoys, one stopped: 9,470 requests
// counted instead of about 2,000, 15.16% "hedged", the delay raised from 18.7
// to 50.6ms). Each case is three ticks, 5s apart; the reading spans them.
func TestSamplerCountsEachProxy(t *testing.T) {
	const absent = -1
	type counts struct{ requests, retries float64 }
	for _, tc := range []struct {
		name string
		// ticks holds each proxy's counts at each tick; absent: Prometheus
		// has no sample of that proxy then (a missed scrape is marked stale).
		ticks map[string][3]counts
		// want is the hand-computed increase over the three ticks.
		want counts
		// sums is what the summed series read as (a fall was a reset).
		sums counts
	}{{
		name: "a restarts and counts 10, then 5; b counts 0, then 5",
		ticks: map[string][3]counts{
			"envoy-a": {{1000, 100}, {10, 1}, {15, 2}},
			"envoy-b": {{1000, 100}, {1000, 100}, {1005, 101}},
		},
		// The sums 2000 -> 1010 -> 1020 read as a reset: 1010 + 10.
		want: counts{20, 3}, sums: counts{1020, 103},
	}, {
		name: "a misses the scrape at the second tick",
		ticks: map[string][3]counts{
			"envoy-a": {{1000, 100}, {absent, 0}, {1010, 101}},
			"envoy-b": {{1000, 100}, {1005, 100}, {1010, 102}},
		},
		// 2000 -> 1005 (a reset) -> 2020: 1005 + 1015.
		want: counts{20, 3}, sums: counts{2020, 203},
	}, {
		name: "a restarts while it is not scraped",
		ticks: map[string][3]counts{
			"envoy-a": {{1000, 100}, {absent, 0}, {8, 1}},
			"envoy-b": {{1000, 100}, {1005, 100}, {1010, 100}},
		},
		want: counts{18, 1}, sums: counts{1018, 101},
	}, {
		name: "a stops for good after the second tick",
		ticks: map[string][3]counts{
			"envoy-a": {{1000, 100}, {1005, 100}, {absent, 0}},
			"envoy-b": {{1000, 100}, {1005, 101}, {1010, 102}},
		},
		// 2000 -> 2010 -> 1010 (a reset): 10 + 1010.
		want: counts{15, 2}, sums: counts{1020, 103},
	}, {
		// Its 500 requests came before its first sample, at delays this
		// reading does not judge: the first sample is its baseline.
		name: "c appears at the second tick",
		ticks: map[string][3]counts{
			"envoy-a": {{1000, 100}, {1005, 100}, {1010, 101}},
			"envoy-c": {{absent, 0}, {500, 50}, {505, 51}},
		},
		want: counts{15, 2}, sums: counts{515, 52},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			policy := testPolicy()
			// Its tick is 5s, as the test's: memory keeps every one.
			policy.Spec.EvaluationInterval = &metav1.Duration{Duration: 15 * time.Second}
			cluster := plan.ClusterName(policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port)
			prom := &seriesProm{t: t}
			est := newPrometheus(prom, time.Second)
			sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
				return []tailcutv1alpha1.HedgePolicy{*policy}, nil
			}, nil, logr.Discard())
			for i := range 3 {
				at := t0.Add(time.Duration(i) * 5 * time.Second)
				var state []proxyScrape
				for pod, ticks := range tc.ticks {
					if c := ticks[i]; c.requests != absent {
						p := proxy(pod, c.requests, c.retries)
						p.cluster, p.scraped = cluster, at.Add(-500*time.Millisecond)
						state = append(state, p)
					}
				}
				prom.set(state...)
				sampler.Tick(context.Background(), at)
			}
			a, _, ok := est.memory.envoyAnswers(cluster, span{since: t0.Add(-time.Second), rng: 11 * time.Second}, time.Minute, 5*time.Second)
			if !ok {
				t.Fatal("nothing read")
			}
			retries, attempts := vectorValue(t, a.retries), vectorValue(t, a.attempts)
			b := bucketsOf(a.buckets)
			if requests := attempts - retries; requests != tc.want.requests || retries != tc.want.retries || b["+Inf"] != tc.want.requests {
				t.Errorf("read %v requests (%v in the histogram), %v retries; want %v and %v (summed over the proxies: %v and %v)",
					requests, b["+Inf"], retries, tc.want.requests, tc.want.retries, tc.sums.requests, tc.sums.retries)
			}
			if want := 0.9 * tc.want.requests; b["16"] < want-1e-9 || b["16"] > want+1e-9 {
				t.Errorf("read %v requests under 16ms, want %v", b["16"], want)
			}
		})
	}
}
