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
	"testing"
	"time"
)

// readingsOf builds readings 10 s apart of the hedged cluster "h": each
// interval sends 1,500 requests and the given hedges.
func readingsOf(hedges ...float64) []reading {
	start := time.Unix(1000, 0)
	var requests, retries float64
	at := func(i int) reading {
		labels := map[string]string{"envoy_cluster_name": "h"}
		return reading{at: start.Add(time.Duration(i) * 10 * time.Second), c: counts{
			seriesKey(envoyTotal, labels, "a"): requests + retries,
			seriesKey(envoyRetry, labels, "a"): retries,
		}}
	}
	rs := []reading{at(0)}
	for i, h := range hedges {
		requests, retries = requests+1500, retries+h
		rs = append(rs, at(i+1))
	}
	return rs
}

func TestWorstStretchIsTheWorstWindowOrLonger(t *testing.T) {
	// Hedges per 10 s: 30, 90, 60, 75. Stretches of 30 s or more: 0-30 s
	// 180 for 4,500 (4%), 10-40 s 225 for 4,500 (5%), 0-40 s 255 for 6,000
	// (4.25%). The whole run is 4.25%; its worst 30 s, 5%.
	w := worstStretch(readingsOf(30, 90, 60, 75), 30*time.Second, "h", "u")
	if w == nil {
		t.Fatal("no stretch")
	}
	if w.StartS != 10 || w.Seconds != 30 || w.Requests != 4500 || w.Hedges != 225 || math.Abs(w.Pct-5) > 1e-9 || w.Readings != 5 || w.Window != "30s" {
		t.Errorf("worst stretch %+v, want 225 hedges for 4500 requests (5%%), 30 s from 10 s, of 5 readings", w)
	}
	if w := worstStretch(readingsOf(30, 90), 30*time.Second, "h", "u"); w != nil {
		t.Errorf("20 s of readings gave the stretch %+v, want none", w)
	}
}

func TestWorstStretchIsTheNearestToTheBudget(t *testing.T) {
	// Hedges per 10 s: 77, 60, 60, 119. 10-40 s: 239 for 4,500 (5.31%), the
	// most per request, but a 5% budget allows it 0.05 x (4,500 + 300) = 240.
	// 0-40 s: 316 for 6,000 (5.27%), allowed 0.05 x (6,000 + 300) = 315: over.
	w := worstStretch(readingsOf(77, 60, 60, 119), 30*time.Second, "h", "u")
	if w == nil || w.StartS != 0 || w.Seconds != 40 || w.Hedges != 316 || math.Abs(w.AllowedHedges(5)-315) > 1e-9 {
		t.Fatalf("worst stretch %+v, want 0-40 s: 316 hedges, 315 allowed", w)
	}
}

func TestAllowedHedgesCountASecondAtEachEnd(t *testing.T) {
	// 4,530 requests over 30.2 s: 150 a second; within 5%, the stretch and
	// a second at each end: 0.05 x (4,530 + 300) = 241.5.
	s := StretchLoad{Seconds: 30.2, Requests: 4530}
	if got := s.AllowedHedges(5); math.Abs(got-241.5) > 1e-9 {
		t.Errorf("allowed %v hedges, want 241.5", got)
	}
}
