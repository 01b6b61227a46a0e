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
	"time"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
)

// FuzzEstimateStaysInBounds feeds the estimator whatever Prometheus may
// answer (histogram buckets in any order and size, NaN, infinities,
// negative counts, a Custom value, hedge counters) on top of any previous
// decision, for any spec the API admits. Whatever it decides, the delay is
// within [min, max] or hedging is off, and the reason is one readable line
// (checkInvariants). go test runs the seeds; make fuzz searches.
func FuzzEstimateStaysInBounds(f *testing.F) {
	steps := func(n float64, F func(float64) float64) []byte {
		// Per-bucket shares of 255, the cumulative counts the fuzz target rebuilds.
		out := make([]byte, 0, len(envoyconf.LatencyBucketsMs))
		prev := 0.0
		for _, b := range envoyconf.LatencyBucketsMs {
			c := F(b)
			out = append(out, byte(math.Round(255*(c-prev))))
			prev = c
		}
		return out
	}
	f.Add(5000.0, steps(5000, bimodal(15, 0.03)), 0.0, 10000.0, 300.0, uint16(5), uint16(1000), uint16(20), false, 0.95)
	f.Add(5000.0, steps(5000, lognormal(50, 0.5)), 0.0, 10000.0, 3000.0, uint16(1), uint16(10000), uint16(0), false, 0.99)
	f.Add(math.NaN(), []byte{1, 2, 3}, math.NaN(), math.NaN(), math.Inf(1), uint16(5), uint16(1000), uint16(2000), true, 0.95)
	f.Add(-1.0, []byte{255, 0, 255}, -0.01, -5.0, -5.0, uint16(5), uint16(5), uint16(5), true, 0.999)
	f.Add(1e9, []byte{}, 1e9, 1e9, 1e12, uint16(10000), uint16(10000), uint16(9000), true, 0.51)
	f.Add(0.0, []byte{}, math.Inf(-1), 0.0, 0.0, uint16(2), uint16(3), uint16(1), false, 0.9)

	prom := newFakeProm(f)
	f.Fuzz(func(t *testing.T, total float64, shares []byte, custom, requests, retries float64, minMs, maxMs, priorMs uint16, useCustom bool, quantile float64) {
		// Only specs the API admits (its CEL rules).
		lo, hi := time.Duration(max(1, min(minMs, 10000)))*time.Millisecond, time.Duration(max(1, min(maxMs, 10000)))*time.Millisecond
		if lo > hi {
			lo, hi = hi, lo
		}
		if math.IsNaN(quantile) || quantile <= 0.5 || quantile > 0.999 {
			quantile = 0.95
		}
		policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
			a.Min, a.Max, a.Quantile = dur(lo), dur(hi), quantile
			if useCustom {
				a.Source = tailcutv1alpha1.EstimateSourceCustom
				a.Query = `histogram_quantile({{.Quantile}}, sum by (le) (rate(x_bucket{namespace="{{.Namespace}}"}[{{.Window}}])))`
			}
		}))
		if priorMs > 0 {
			prior(time.Duration(priorMs)*time.Millisecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 5*time.Minute)(policy)
		}

		samples := make([]sample, 0, len(shares)+1)
		cum := 0.0
		for i, s := range shares {
			if i >= len(envoyconf.LatencyBucketsMs) {
				break
			}
			cum += float64(s) / 255 * total
			samples = append(samples, sample{Labels: map[string]string{"le": promFloat(envoyconf.LatencyBucketsMs[i])}, Value: cum})
		}
		samples = append(samples, sample{Labels: map[string]string{"le": "+Inf"}, Value: total})
		prom.set(kBuckets, reply{Body: vectorJSON(samples...)})
		prom.set(kPrev, reply{Body: vectorJSON(samples...)})
		prom.set(kQuantile, one(custom))
		prom.set(kRetries, one(retries))
		prom.set(kAttempts, one(requests))

		// A new estimator each time: one would decide from its memory of
		// the last input, not from this input's prior.
		est, err := NewPrometheus(PrometheusOptions{Address: prom.URL, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			res Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := sampleAndEstimate(est, policy, now)
			done <- outcome{res, err}
		}()
		var o outcome
		select {
		case o = <-done:
		case <-time.After(10 * time.Second):
			// Every query answers at once; only the decision can take this long.
			t.Fatalf("Estimate did not return within 10s")
		}
		if o.err != nil {
			t.Fatalf("Estimate: %v", o.err)
		}
		checkInvariants(t, policy, o.res)
	})
}
