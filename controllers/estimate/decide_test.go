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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// mustCDF is a latency histogram from cumulative counts at bucket bounds in
// milliseconds.
func mustCDF(t *testing.T, cum map[float64]float64) *cdf {
	t.Helper()
	points := map[float64]float64{}
	top := 0.0
	for ms, n := range cum {
		points[ms/1000] = n
		top = math.Max(top, n)
	}
	points[math.Inf(1)] = top
	c, err := newCDF(points)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDecideOverReadings is #25's table of decide alone: readings in, a
// decision out, no Prometheus and no sampler. The expected values are the
// buckets' arithmetic: of 2,000 requests, 1,920 fall in Envoy's bucket le=16
// (a circllhist bin: faster than 17 ms) and 80 in le=120; the bucket le=14
// leaves all 2,000 past it, le=16 leaves 4%, within a 5% budget and within
// 90% of its share (headroom.go), so the delay is 17 ms, with no margin:
// every fast request answered before it.
func TestDecideOverReadings(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	bimodal := func(t *testing.T) *cdf { return mustCDF(t, map[float64]float64{14: 0, 16: 1920, 110: 1920, 120: 2000}) }
	oneSlowReplica := func(t *testing.T) readings {
		c := mustCDF(t, map[float64]float64{14: 0, 16: 2000, 110: 2000, 120: 3000})
		return readings{cdf: c, edge: envoyEdge, samples: 3000, hedge: &hedgeReading{requests: 3000}}
	}
	inForce := func(d time.Duration) func(*tailcutv1alpha1.HedgePolicy) {
		return func(p *tailcutv1alpha1.HedgePolicy) {
			p.Status.EffectiveDelay = dur(d)
			p.Status.DelaySource = tailcutv1alpha1.DelaySourcePrometheus
			changed := metav1.NewTime(now.Add(-10 * time.Minute))
			p.Status.LastDelayChange = &changed
		}
	}
	spanAt := func(d time.Duration) span {
		sp := span{rng: 2 * time.Minute, since: now.Add(-2 * time.Minute), delay: d, censorAt: math.Inf(1)}
		if d > 0 {
			sp.censorAt = d.Seconds()
		}
		return sp
	}
	cases := []struct {
		name     string
		inForce  time.Duration
		readings func(t *testing.T) readings
		check    func(t *testing.T, res Result)
		policy   func(*tailcutv1alpha1.HedgePolicy)
	}{
		{"first delay, hedging off: in the fast mode", 0, func(t *testing.T) readings {
			return readings{cdf: bimodal(t), edge: envoyEdge, samples: 2000, hedge: &hedgeReading{requests: 2000}}
		}, func(t *testing.T, res Result) {
			if !res.Derived || res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.Delay != 17*time.Millisecond {
				t.Errorf("delay %s from %s (derived %v), want 17ms from Prometheus", res.Delay, res.Source, res.Derived)
			}
		}, nil},
		{"over budget: raised", 18700 * time.Microsecond, func(t *testing.T) readings {
			// 9% hedged at 18.7 ms: the budget is 5%.
			return readings{cdf: bimodal(t), edge: envoyEdge, samples: 2000, hedge: &hedgeReading{requests: 2000, retries: 180}}
		}, func(t *testing.T, res Result) {
			if res.Delay <= 18700*time.Microsecond || !strings.Contains(res.Reason, "over budget: raising from 18.7ms") {
				t.Errorf("delay %s (%s), want above 18.7ms, raised for the budget", res.Delay, res.Reason)
			}
		}, nil},
		{"no data: the fallback", 18700 * time.Microsecond, func(t *testing.T) readings {
			return readings{fail: newNoData(tailcutv1alpha1.ReasonQueryTimeout, "histogram query got no answer within 5s")}
		}, func(t *testing.T, res Result) {
			if res.Derived || res.DerivedReason != tailcutv1alpha1.ReasonQueryTimeout {
				t.Errorf("derived %v (%s), want not derived, QueryTimeout", res.Derived, res.DerivedReason)
			}
		}, nil},
		{"too few samples before any derivation", 0, func(t *testing.T) readings {
			return readings{thin: "60 requests, fewer than minSamples 100", samples: 60}
		}, func(t *testing.T, res Result) {
			if res.Derived || res.DerivedReason != tailcutv1alpha1.ReasonTooFewSamples || res.Source == tailcutv1alpha1.DelaySourcePrometheus {
				t.Errorf("derived %v (%s) from %s, want not derived, TooFewSamples, not from Prometheus", res.Derived, res.DerivedReason, res.Source)
			}
		}, nil},
		{"queueing while hedging: paused", 20 * time.Millisecond, func(t *testing.T) readings {
			// A window ago: 2,000 requests spread over (10, 20] ms (median
			// 15, p10 11). Now: 10% still by 12 ms (p10 12, under 1.2 x 11),
			// the rest spread to 40 ms (median 24.4, over 1.5 x 15), with
			// 4% hedged (over half the 5% budget).
			before := mustCDF(t, map[float64]float64{10: 0, 20: 2000})
			queued := mustCDF(t, map[float64]float64{10: 0, 12: 200, 40: 2000})
			return readings{cdf: queued, edge: envoyEdge, samples: 2000, prev: before, last: queued, earlier: queued,
				hedge: &hedgeReading{requests: 2000, retries: 80}}
		}, func(t *testing.T, res Result) {
			if res.Delay != 0 || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts {
				t.Errorf("delay %s (%s: %s), want hedging paused for HedgingHurts", res.Delay, res.DerivedReason, res.Reason)
			}
		}, nil},
		// Beside two busy loops the local stack read, in one tick after a
		// change to 25.3 ms, 25 of 290 requests past it (le=25: faster than
		// 26 ms); the ticks around it read 11 of 335 and 14 of 308. 25 of
		// 290 is 8.62%, over a 5% budget at 290 requests (5.25% + 2 x 1.31%
		// = 7.87%): the delay goes up, but one tick is a burst, not the
		// delay's cost, and sets no floor to hold it there for a window.
		{"over in one tick only: raised, no floor", 25300 * time.Microsecond, func(t *testing.T) readings {
			burst := mustCDF(t, map[float64]float64{14: 0, 16: 240, 25: 265, 50: 286, 120: 290})
			return readings{cdf: burst, parts: []*cdf{burst}, edge: envoyEdge, samples: 290, hedge: &hedgeReading{requests: 336, retries: 11}}
		}, func(t *testing.T, res Result) {
			if res.Delay <= 25300*time.Microsecond || res.Floor != nil || !strings.Contains(res.Reason, "over in one tick's scrapes only: no budget floor") {
				t.Errorf("delay %s, floor %+v (%s), want raised above 25.3ms and no floor", res.Delay, res.Floor, res.Reason)
			}
		}, nil},
		// The same share in two ticks: 50 of 580 (8.62%, over the 7.10% that
		// 580 requests allow), and 25 of 290 without either: a floor at 25.3 ms.
		{"over in two ticks: a floor", 25300 * time.Microsecond, func(t *testing.T) readings {
			burst := mustCDF(t, map[float64]float64{14: 0, 16: 240, 25: 265, 50: 286, 120: 290})
			both := mustCDF(t, map[float64]float64{14: 0, 16: 480, 25: 530, 50: 572, 120: 580})
			return readings{cdf: both, parts: []*cdf{burst, burst}, edge: envoyEdge, samples: 580, hedge: &hedgeReading{requests: 672, retries: 22}}
		}, func(t *testing.T, res Result) {
			if res.Delay <= 25300*time.Microsecond || res.Floor == nil || res.Floor.Delay.Duration != 25300*time.Microsecond {
				t.Errorf("delay %s, floor %+v (%s), want raised above 25.3ms, a floor at 25.3ms", res.Delay, res.Floor, res.Reason)
			}
		}, nil},
		// The fast mode was at 40 ms for most of the span and is back at 15:
		// 2,500 requests before the last two intervals, 2,375 of them in
		// (36, 40] ms and 125 slow, then 1,500 with 1,424 faster than 17 ms
		// (le=16) and 76 slow. The span reads 41 ms (5.03% past it, within
		// 5.25% + 2 x 0.35%), the delay in force is 45.1 ms. The two
		// intervals read 17 ms (5.07% past it, within 5.25% + 2 x 0.58%),
		// where all 2,500 before them ran past: the delay comes down,
		// toward 17 ms + 10% by at most 50%, rather than a window later.
		{"a slow stretch has passed: the last two intervals bring the delay down", 45100 * time.Microsecond, func(t *testing.T) readings {
			interval := mustCDF(t, map[float64]float64{14: 0, 16: 712, 36: 712, 40: 712, 110: 712, 120: 750, 150: 750})
			span := mustCDF(t, map[float64]float64{14: 0, 16: 1424, 36: 1424, 40: 3799, 110: 3799, 120: 3875, 150: 4000})
			return readings{cdf: span, edge: envoyEdge, samples: 4000, last: interval, earlier: interval,
				hedge: &hedgeReading{requests: 4000, retries: 190}}
		}, func(t *testing.T, res Result) {
			if res.Target != 18700*time.Microsecond || res.Delay >= 45100*time.Microsecond || res.Delay < 22500*time.Microsecond ||
				!strings.Contains(res.Reason, "5.07% of them took longer than 17ms, against 100.00% of the 2500 before them") {
				t.Errorf("delay %s, target %s (%s), want a target of 18.7ms, a step down from 45.1ms, and why", res.Delay, res.Target, res.Reason)
			}
		}, nil},
		// Steady: the two intervals drew a little fewer slow requests than
		// the span (5.87% against 6.88% past 17 ms; 1.25 standard errors of
		// the difference apart), enough for a reading of 17 ms at their
		// count, not for a reason to move: the span's 19 ms (+10%) holds.
		{"steady: two intervals that drew fewer slow requests move nothing", 20900 * time.Microsecond, func(t *testing.T) readings {
			interval := mustCDF(t, map[float64]float64{14: 0, 16: 706, 18: 712, 120: 750})
			span := mustCDF(t, map[float64]float64{14: 0, 16: 3740, 18: 3800, 120: 4000})
			return readings{cdf: span, edge: envoyEdge, samples: 4000, last: interval, earlier: interval,
				hedge: &hedgeReading{requests: 4000, retries: 190}}
		}, func(t *testing.T, res Result) {
			if res.Target != 20900*time.Microsecond || res.Delay != 20900*time.Microsecond || strings.Contains(res.Reason, "intervals") {
				t.Errorf("delay %s, target %s (%s), want 20.9ms from the span", res.Delay, res.Target, res.Reason)
			}
		}, nil},
		// One replica of three 100 ms slower (issue #26's badhost): of 3,000
		// requests 2,000 are faster than 17 ms (le=16) and 1,000 in le=120
		// (faster than 130 ms). The median is 15.5 ms (rank 1,500 of the
		// 2,000 in (14, 16]); a third of the requests take twice that or
		// more. Within a 5% budget the delay is 130 ms, the first edge
		// with at most 6.07% past it (5.25% + two standard errors), and a
		// hedge answers after 130 + 14 ms, when every request has.
		{"one slow replica of three: out of reach", 0, oneSlowReplica, func(t *testing.T, res Result) {
			if res.Delay != 0 || res.Source != tailcutv1alpha1.DelaySourceNone || res.Derived || res.DerivedReason != tailcutv1alpha1.ReasonTailOutOfReach {
				t.Errorf("delay %s from %s (derived %v, %s), want hedging off, not derived, TailOutOfReach", res.Delay, res.Source, res.Derived, res.DerivedReason)
			}
			for _, want := range []string{"33.3% of 3000 requests took 31ms or longer (2x the median 15.5ms)", "after 130ms", "after 144ms",
				"all but 0.00% of requests", "maxExtraLoadPercent 49 or more, with auto.quantile at most 0.51"} {
				if !strings.Contains(res.Reason, want) {
					t.Errorf("reason %q does not say %q", res.Reason, want)
				}
			}
		}, nil},
		// The same with the budget the reason asks for: 49% (a third, x
		// 1.45, rounded up), and the quantile that lets it bind (0.51, the
		// lowest the API takes). 49% may run past the delay, the slow third
		// does, and the delay goes to the fast mode's edge, 17 ms, with no
		// margin: the third past it is within 90% of the budget's share.
		{"one slow replica, the budget the reason asks for: hedged", 0, oneSlowReplica, func(t *testing.T, res Result) {
			if !res.Derived || res.Delay != 17*time.Millisecond {
				t.Errorf("delay %s (derived %v, %s: %s), want 17ms", res.Delay, res.Derived, res.DerivedReason, res.Reason)
			}
		}, func(p *tailcutv1alpha1.HedgePolicy) {
			p.Spec.Budget.MaxExtraLoadPercent = 49
			p.Spec.Delay.Auto.Quantile = 0.51
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Delay.Auto.Window = dur(2 * time.Minute) })
			if tc.policy != nil {
				tc.policy(p)
			}
			if tc.inForce > 0 {
				inForce(tc.inForce)(p)
			}
			a := p.Spec.EffectiveAuto()
			res := decide(p, &a, spanAt(tc.inForce), tc.readings(t), now)
			checkInvariants(t, p, res)
			tc.check(t, res)
		})
	}
}
