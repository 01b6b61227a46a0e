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

package verify

import (
	"math"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestIndependentArrivals: each phase holds exactly rate x its length
// requests, inside it; the gaps are exponential (their coefficient of
// variation is 1, where a constant schedule's is 0); and two arms are
// independent: the share of hedged requests with a bypass request within
// 100µs is about 1-exp(-2 x 150/s x 100µs) = 2.96%, where on the constant
// schedule every request had one.
func TestIndependentArrivals(t *testing.T) {
	const rate = 150
	settle, measured := 20*time.Second, time.Minute
	hedged := schedule(Independent, ArmHedged, rate, settle, measured)
	bypass := schedule(Independent, ArmBypass, rate, settle, measured)
	for name, at := range map[string][]time.Duration{ArmHedged: hedged, ArmBypass: bypass} {
		if !slices.IsSorted(at) {
			t.Fatalf("%s: schedule not in order", name)
		}
		n := sort.Search(len(at), func(i int) bool { return at[i] > settle })
		if n != rate*20 || len(at)-n != rate*60 {
			t.Errorf("%s: %d settling and %d measured requests, want %d and %d", name, n, len(at)-n, rate*20, rate*60)
		}
		if at[0] <= 0 || at[len(at)-1] > settle+measured {
			t.Errorf("%s: sends from %s to %s, outside (0, %s]", name, at[0], at[len(at)-1], settle+measured)
		}
		if cv := gapVariation(at); math.Abs(cv-1) > 0.05 {
			t.Errorf("%s: gaps' coefficient of variation %.3f, want about 1 (exponential)", name, cv)
		}
	}
	if cv := gapVariation(schedule(Constant, ArmHedged, rate, settle, measured)); cv > 0.01 {
		t.Errorf("constant schedule: gaps' coefficient of variation %.3f, want 0", cv)
	}
	near := func(a, b []time.Duration) float64 {
		close := 0
		for _, x := range a {
			i := sort.Search(len(b), func(i int) bool { return b[i] >= x-100*time.Microsecond })
			if i < len(b) && b[i] <= x+100*time.Microsecond {
				close++
			}
		}
		return float64(close) / float64(len(a))
	}
	want := 1 - math.Exp(-2*rate*100e-6)
	if got := near(hedged, bypass); math.Abs(got-want) > 0.01 {
		t.Errorf("%.2f%% of hedged requests have a bypass request within 100µs, want about %.2f%% (independent arms)", 100*got, 100*want)
	}
	c1, c2 := schedule(Constant, ArmHedged, rate, measured), schedule(Constant, ArmBypass, rate, measured)
	if got := near(c1, c2); got != 1 {
		t.Errorf("constant schedules: %.2f%% of requests paired, want 100%%", 100*got)
	}
}

// gapVariation is the coefficient of variation of the gaps between sends.
func gapVariation(at []time.Duration) float64 {
	var sum, sq float64
	for i := 1; i < len(at); i++ {
		g := (at[i] - at[i-1]).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(at) - 1)
	mean := sum / n
	return math.Sqrt(sq/n-mean*mean) / mean
}
