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
	"testing"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

func TestClusterNames(t *testing.T) {
	h, b := ClusterNames("shop", "cart", 8080)
	if h != "tailcut_shop_cart_8080" || b != "tailcut_shop_cart_8080_bypass" {
		t.Errorf("ClusterNames = %q, %q", h, b)
	}
}

func TestBuiltinQueries(t *testing.T) {
	cases := []struct {
		name   string
		policy *tailcutv1alpha1.HedgePolicy
		want   querySet
	}{
		{
			name:   "Envoy",
			policy: testPolicy(),
			want: querySet{
				quantile:    `histogram_quantile(0.95, sum by (le) (rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="tailcut_shop_cart_8080_bypass"}[2m]))) / 1000`,
				buckets:     `sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="tailcut_shop_cart_8080_bypass"}[2m]))`,
				prevBuckets: `sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="tailcut_shop_cart_8080_bypass"}[2m] offset 2m))`,
				count:       `sum(increase(envoy_cluster_upstream_rq_time_count{envoy_cluster_name="tailcut_shop_cart_8080_bypass"}[2m]))`,
				retries:     `sum(increase(envoy_cluster_upstream_rq_retry{envoy_cluster_name="tailcut_shop_cart_8080"}[2m]))`,
				attempts:    `sum(increase(envoy_cluster_upstream_rq_total{envoy_cluster_name="tailcut_shop_cart_8080"}[2m]))`,
				boundScale:  1e-3,
			},
		},
		{
			name: "Workload with labels, window 90s, q 0.99",
			policy: testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
				a.Source = tailcutv1alpha1.EstimateSourceWorkload
				a.Quantile = 0.99
				a.Window = dur(90_000 * ms)
				a.Workload = &tailcutv1alpha1.WorkloadMetric{Labels: map[string]string{"job": "cart", "code": `2"xx`}}
			})),
			want: querySet{
				quantile:    `histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{namespace="shop",code="2\"xx",job="cart"}[1m30s])))`,
				buckets:     `sum by (le) (increase(http_request_duration_seconds_bucket{namespace="shop",code="2\"xx",job="cart"}[1m30s]))`,
				prevBuckets: `sum by (le) (increase(http_request_duration_seconds_bucket{namespace="shop",code="2\"xx",job="cart"}[1m30s] offset 1m30s))`,
				count:       `sum(increase(http_request_duration_seconds_count{namespace="shop",code="2\"xx",job="cart"}[1m30s]))`,
				retries:     `sum(increase(envoy_cluster_upstream_rq_retry{envoy_cluster_name="tailcut_shop_cart_8080"}[1m30s]))`,
				attempts:    `sum(increase(envoy_cluster_upstream_rq_total{envoy_cluster_name="tailcut_shop_cart_8080"}[1m30s]))`,
				boundScale:  1,
			},
		},
		{
			name: "Workload in milliseconds, published through Istio",
			policy: testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
				a.Source = tailcutv1alpha1.EstimateSourceWorkload
				a.Workload = &tailcutv1alpha1.WorkloadMetric{Metric: "rpc_latency_milliseconds"}
			}), func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Publish.Target = tailcutv1alpha1.PublishIstio }),
			want: querySet{
				quantile:    `histogram_quantile(0.95, sum by (le) (rate(rpc_latency_milliseconds_bucket{namespace="shop"}[2m]))) / 1000`,
				buckets:     `sum by (le) (increase(rpc_latency_milliseconds_bucket{namespace="shop"}[2m]))`,
				prevBuckets: `sum by (le) (increase(rpc_latency_milliseconds_bucket{namespace="shop"}[2m] offset 2m))`,
				count:       `sum(increase(rpc_latency_milliseconds_count{namespace="shop"}[2m]))`,
				boundScale:  1e-3,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.policy.Spec.EffectiveAuto()
			got, err := buildQueries(tc.policy, &a)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("queries\n got %+v\nwant %+v", got, tc.want)
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
		if got := c.tail(tc.want); math.Abs(got-(1-tc.q)) > 1e-12 {
			t.Errorf("tail(%v) = %v, want %v", tc.want, got, 1-tc.q)
		}
	}
	if got := c.tail(1); got != 0 {
		t.Errorf("tail above every bound = %v", got)
	}
	// A rank in the +Inf bucket gives the highest finite bound, as in Prometheus.
	c, err = newCDF(map[float64]float64{0.01: 10, 0.1: 90, math.Inf(1): 100})
	if err != nil {
		t.Fatal(err)
	}
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

func TestChooseOnSmoothDistributionIsTheQuantile(t *testing.T) {
	for _, F := range []func(float64) float64{lognormal(20, 0.5), lognormal(50, 1), bimodal(15, 0.03), bimodal(15, 0.1)} {
		points := map[float64]float64{math.Inf(1): 10000}
		for _, b := range envoyBoundsMS {
			points[b/1000] = math.Round(10000 * F(b))
		}
		c, err := newCDF(points)
		if err != nil {
			t.Fatal(err)
		}
		ch := c.choose(0.05)
		if ch.onStep || ch.delay != c.quantile(0.95) {
			t.Errorf("choose = %+v, want the plain p95 %v", ch, c.quantile(0.95))
		}
	}
}
