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
	"testing"
	"time"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// TestBuiltinQueries pins the PromQL the estimator sends. The Envoy source
// reads the hedged route's cluster, and never the bypass cluster, which
// carries the traffic tailcut does not hedge.
func TestBuiltinQueries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(*tailcutv1alpha1.HedgePolicy)
		rng    time.Duration
		want   querySet
	}{
		{
			// The sampler reads every tailcut cluster in one batch
			// (sampleBuckets, sampleCounters): nothing of its own.
			name: "Envoy through tailcut's xDS: no query of its own",
			rng:  45 * time.Second,
			want: querySet{},
		},
		{
			name: "Workload with labels, window 90s, evaluated every 10s",
			policy: func(p *tailcutv1alpha1.HedgePolicy) {
				p.Spec.EvaluationInterval = dur(10 * time.Second)
				a := p.Spec.Delay.Auto
				a.Source, a.Window = tailcutv1alpha1.EstimateSourceWorkload, dur(90*time.Second)
				a.Workload = &tailcutv1alpha1.WorkloadMetric{Metric: "rpc_seconds", Labels: map[string]string{"job": "cart", "app": `we"ird`}}
			},
			rng: 90 * time.Second,
			want: querySet{
				buckets:        `sum by (le) (increase(rpc_seconds_bucket{namespace="shop",app="we\"ird",job="cart"}[1m30s]))`,
				prevBuckets:    `sum by (le) (increase(rpc_seconds_bucket{namespace="shop",app="we\"ird",job="cart"}[1m30s] offset 1m30s))`,
				lastBuckets:    `sum by (le) (increase(rpc_seconds_bucket{namespace="shop",app="we\"ird",job="cart"}[10s]))`,
				earlierBuckets: `sum by (le) (increase(rpc_seconds_bucket{namespace="shop",app="we\"ird",job="cart"}[10s] offset 10s))`,
				retries:        `sum(increase(envoy_cluster_upstream_rq_retry{envoy_cluster_name="tailcut_shop_cart_8080"}[1m30s]))`,
				attempts:       `sum(increase(envoy_cluster_upstream_rq_total{envoy_cluster_name="tailcut_shop_cart_8080"}[1m30s]))`,
			},
		},
		{
			name: "Workload in milliseconds, published through Istio: the sidecars' hedge counters",
			policy: func(p *tailcutv1alpha1.HedgePolicy) {
				p.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
				a := p.Spec.Delay.Auto
				a.Source = tailcutv1alpha1.EstimateSourceWorkload
				a.Workload = &tailcutv1alpha1.WorkloadMetric{Metric: "http_latency_milliseconds"}
			},
			rng: 2 * time.Minute,
			want: querySet{
				buckets:        `sum by (le) (increase(http_latency_milliseconds_bucket{namespace="shop"}[2m]))`,
				prevBuckets:    `sum by (le) (increase(http_latency_milliseconds_bucket{namespace="shop"}[2m] offset 2m))`,
				lastBuckets:    `sum by (le) (increase(http_latency_milliseconds_bucket{namespace="shop"}[30s]))`,
				earlierBuckets: `sum by (le) (increase(http_latency_milliseconds_bucket{namespace="shop"}[30s] offset 30s))`,
				retries:        `sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_retry{namespace="shop"}[2m]))`,
				attempts:       `sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_total{namespace="shop"}[2m]))`,
			},
		},
		{
			name: "Envoy on an Istio mesh: the hedged routes' own histogram and counters, as the clients' sidecars report them",
			policy: func(p *tailcutv1alpha1.HedgePolicy) {
				p.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
			},
			rng: 2 * time.Minute,
			want: querySet{
				buckets:        `sum by (le) (increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_time_bucket{namespace="shop"}[2m]))`,
				prevBuckets:    `sum by (le) (increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_time_bucket{namespace="shop"}[2m] offset 2m))`,
				lastBuckets:    `sum by (le) (increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_time_bucket{namespace="shop"}[30s]))`,
				earlierBuckets: `sum by (le) (increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_time_bucket{namespace="shop"}[30s] offset 30s))`,
				retries:        `sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_retry{namespace="shop"}[2m]))`,
				attempts:       `sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_total{namespace="shop"}[2m]))`,
			},
		},
		{
			// The names a real Envoy Gateway's Envoy exported for the route
			// stats in TestGatewayHedgesWithRealEnvoyGateway:
			// envoy_vhost_route_upstream_rq_total{envoy_virtual_host="shop/public/http/*",envoy_route="tailcut_shop_api_8080"}.
			name: "Envoy at an Envoy Gateway Gateway: the hedged routes' own histogram and counters, by their stat prefix",
			policy: func(p *tailcutv1alpha1.HedgePolicy) {
				p.Spec.Publish.Target = tailcutv1alpha1.PublishEnvoyGateway
			},
			rng: 2 * time.Minute,
			want: querySet{
				buckets:        `sum by (le) (increase(envoy_vhost_route_upstream_rq_time_bucket{envoy_route="tailcut_shop_cart_8080"}[2m]))`,
				prevBuckets:    `sum by (le) (increase(envoy_vhost_route_upstream_rq_time_bucket{envoy_route="tailcut_shop_cart_8080"}[2m] offset 2m))`,
				lastBuckets:    `sum by (le) (increase(envoy_vhost_route_upstream_rq_time_bucket{envoy_route="tailcut_shop_cart_8080"}[30s]))`,
				earlierBuckets: `sum by (le) (increase(envoy_vhost_route_upstream_rq_time_bucket{envoy_route="tailcut_shop_cart_8080"}[30s] offset 30s))`,
				retries:        `sum(increase(envoy_vhost_route_upstream_rq_retry{envoy_route="tailcut_shop_cart_8080"}[2m]))`,
				attempts:       `sum(increase(envoy_vhost_route_upstream_rq_total{envoy_route="tailcut_shop_cart_8080"}[2m]))`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			if tc.policy != nil {
				tc.policy(p)
			}
			a := p.Spec.EffectiveAuto()
			got, err := buildQueries(p, &a, tc.rng)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []struct{ name, got, want string }{
				{"buckets", got.buckets, tc.want.buckets}, {"prevBuckets", got.prevBuckets, tc.want.prevBuckets},
				{"lastBuckets", got.lastBuckets, tc.want.lastBuckets},
				{"earlierBuckets", got.earlierBuckets, tc.want.earlierBuckets}, {"retries", got.retries, tc.want.retries},
				{"attempts", got.attempts, tc.want.attempts}, {"quantile", got.quantile, tc.want.quantile},
			} {
				if q.got != q.want {
					t.Errorf("%s:\n got  %s\n want %s", q.name, q.got, q.want)
				}
			}
			for _, q := range []string{got.buckets, got.prevBuckets, got.lastBuckets, got.earlierBuckets, got.retries, got.attempts} {
				if strings.Contains(q, "_bypass") {
					t.Errorf("query reads the bypass cluster: %s", q)
				}
			}
		})
	}
}

func TestCDF(t *testing.T) {
	// 100 requests: 10 <= 10ms, 50 <= 20ms, 90 <= 40ms, 100 <= 100ms.
	c, err := newCDF(map[float64]float64{0.01: 10, 0.02: 50, 0.04: 90, 0.1: 100, math.Inf(1): 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, want float64 }{
		{0.05, 0.005}, {0.1, 0.01}, {0.5, 0.02}, {0.7, 0.03}, {0.95, 0.07}, {1, 0.1},
	} {
		if got := c.quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	// shortest: the first bound whose tail is within the share, at its edge.
	for _, tc := range []struct {
		allowed, want float64
		edge          bucketEdge
		ok            bool
	}{
		{0.5, 0.02, exactEdge, true}, {0.1, 0.04, exactEdge, true}, {0.1, 0.041, envoyEdge, true},
		{0.49, 0.04, exactEdge, true}, {0, 0.1, exactEdge, true}, {0, 0.11, envoyEdge, true},
	} {
		d, _, ok := c.shortest(tc.allowed, tc.edge)
		if ok != tc.ok || math.Abs(d-tc.want) > 1e-12 {
			t.Errorf("shortest(%v) = %v %v, want %v", tc.allowed, d, ok, tc.want)
		}
	}
	// Nothing but the +Inf bucket qualifies.
	c, err = newCDF(map[float64]float64{0.01: 10, 0.1: 90, math.Inf(1): 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.shortest(0.05, exactEdge); ok {
		t.Error("shortest found a bound although 10% of requests are in the +Inf bucket")
	}
	// A rank in the +Inf bucket gives the highest finite bound, as in Prometheus.
	if got := c.quantile(0.95); got != 0.1 {
		t.Errorf("quantile in the +Inf bucket = %v, want 0.1", got)
	}
	// increase() may give non-monotonic buckets; they are made monotonic.
	c, err = newCDF(map[float64]float64{0.01: 10, 0.02: 9.5, 0.04: 20, math.Inf(1): 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.quantile(0.5); got != 0.01 {
		t.Errorf("quantile after monotonic fix = %v, want 0.01", got)
	}
	for name, pts := range map[string]map[float64]float64{
		"no +Inf":  {0.01: 10},
		"NaN":      {0.01: math.NaN(), math.Inf(1): 1},
		"negative": {0.01: -1, math.Inf(1): 1},
		"empty":    {0.01: 0, math.Inf(1): 0},
	} {
		if _, err := newCDF(pts); err == nil {
			t.Errorf("%s: newCDF accepted %v", name, pts)
		}
	}
}

// TestBeyond: the share proven slower than a delay, from the first bucket
// edge at or past it.
func TestBeyond(t *testing.T) {
	c, err := newCDF(map[float64]float64{0.010: 50, 0.020: 90, math.Inf(1): 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want float64 }{
		{0.005, 0.50},
		{0.010, 0.50},
		{0.015, 0.10},
		{0.020, 0.10},
		{0.050, 0}, // past the last finite bound: nothing proven
	} {
		if got := c.beyond(tc.at, exactEdge); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("beyond(%gs) = %g, want %g", tc.at, got, tc.want)
		}
	}
	// Envoy's le=16 holds the requests under 17ms, le=18 those under 19ms.
	e, err := newCDF(map[float64]float64{0.016: 80, 0.018: 90, math.Inf(1): 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want float64 }{{0.016, 0.20}, {0.017, 0.20}, {0.0171, 0.10}, {0.019, 0.10}} {
		if got := e.beyond(tc.at, envoyEdge); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Envoy buckets: beyond(%gs) = %g, want %g", tc.at, got, tc.want)
		}
	}
}
