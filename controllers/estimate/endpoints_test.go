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

	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// load is an endpoint sent rate requests per second that take mean each:
// by Little's law it has rate x mean requests in flight on average.
// It was counted over the whole window, scraped every 2 s.
func load(address string, rate float64, mean time.Duration) endpointLoad {
	active := rate * mean.Seconds()
	return endpointLoad{Address: address, Requests: rate * endpointWindow.Seconds(), Rate: rate, Active: active,
		InFlightSeen: active * endpointWindow.Seconds() / 2}
}

// The local stack's badhost scenario: three replicas at 50 requests/s each,
// one of them 100 ms slower than the others' 16 ms.
var badhost = []endpointLoad{
	load("10.0.0.1:8080", 50, 16*time.Millisecond),
	load("10.0.0.2:8080", 50, 16*time.Millisecond),
	load("10.0.0.3:8080", 50, 116*time.Millisecond),
}

func TestSlowEndpointIsWeightedToHalfTheBudget(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	slow, note := slowEndpoints(badhost, 5, nil, now)
	if len(slow) != 1 {
		t.Fatalf("slow endpoints %+v (%s), want 10.0.0.3:8080 alone", slow, note)
	}
	s := slow[0]
	// Half of a 5% budget, 2.5% of the requests, against two endpoints at
	// 100: w / (w + 200) = 0.025, w = 5.13, so 5 (2.4% of the requests).
	want := tailcutv1alpha1.SlowEndpoint{
		Address: "10.0.0.3:8080", MeanLatency: metav1.Duration{Duration: 116 * time.Millisecond},
		MedianLatency: metav1.Duration{Duration: 16 * time.Millisecond}, RequestPercent: 33.3, Weight: 5, Since: metav1.NewTime(now),
	}
	if s.Address != want.Address || s.MeanLatency != want.MeanLatency || s.MedianLatency != want.MedianLatency ||
		s.RequestPercent != want.RequestPercent || s.Weight != want.Weight || !s.Since.Equal(&want.Since) {
		t.Errorf("slow endpoint %+v, want %+v", s, want)
	}
	for _, part := range []string{"10.0.0.3:8080", "116ms", "16ms", "33.3%", "weight 5 of 100"} {
		if !strings.Contains(note, part) {
			t.Errorf("note %q does not say %q", note, part)
		}
	}
}

func TestEndpointWeight(t *testing.T) {
	for _, c := range []struct {
		budget int32
		n, k   int
		want   int32
	}{
		{5, 3, 1, 5},     // 0.025 x 2 x 100 / 0.975 = 5.13
		{5, 6, 2, 5},     // 0.0125 x 4 x 100 / 0.975 = 5.13
		{1, 3, 1, 1},     // 0.005 x 200 / 0.995 = 1.005
		{50, 3, 1, 66},   // 0.25 x 200 / 0.75 = 66.7
		{200, 3, 1, 99},  // every request's share: never more than the others
		{1, 100, 1, 49},  // 0.005 x 99 x 100 / 0.995 = 49.7
		{1, 1000, 1, 99}, // 0.005 x 999 x 100 / 0.995 = 502: capped
	} {
		if got := endpointWeight(c.budget, c.n, c.k); got != c.want {
			t.Errorf("endpointWeight(%d%%, %d endpoints, %d slow) = %d, want %d", c.budget, c.n, c.k, got, c.want)
		}
	}
}

func TestWeightedEndpointStaysUntilItRecovers(t *testing.T) {
	then := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	prior, _ := slowEndpoints(badhost, 5, nil, then)
	now := then.Add(time.Minute)
	weightedAt := func(mean time.Duration, rate float64) []endpointLoad {
		return []endpointLoad{badhost[0], badhost[1], load("10.0.0.3:8080", rate, mean)}
	}
	for _, c := range []struct {
		name     string
		loads    []endpointLoad
		weighted bool
	}{
		// Hedges cut its attempts short at about the delay plus a fast
		// answer: 34 ms, 2.1x the median.
		{"cut short by hedges", weightedAt(34*time.Millisecond, 3.6), true},
		{"1.9x the median", weightedAt(30*time.Millisecond, 3.6), true},
		{"recovered: 1.25x the median", weightedAt(20*time.Millisecond, 6), false},
		// 0.3/s at 16 ms is 0.72 requests seen in flight over 150 scrapes:
		// too few to judge, and it was weighted a minute ago.
		{"too few requests to judge", weightedAt(16*time.Millisecond, 0.3), true},
		{"no reading", nil, true},
	} {
		slow, note := slowEndpoints(c.loads, 5, prior, now)
		if got := len(slow) == 1; got != c.weighted {
			t.Errorf("%s: weighted %v (%s), want %v", c.name, got, note, c.weighted)
			continue
		}
		if c.weighted && !slow[0].Since.Equal(&prior[0].Since) {
			t.Errorf("%s: since %v, want the first weighing's %v", c.name, slow[0].Since, prior[0].Since)
		}
	}
}

// TestWeightGoesBackAfterTheHold: weighted down, an endpoint may be sent too
// little to be judged again; weightHold after it was weighted it gets its
// full weight back, and is judged again at it.
func TestWeightGoesBackAfterTheHold(t *testing.T) {
	then := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	prior, _ := slowEndpoints(badhost, 5, nil, then)
	unjudged := []endpointLoad{badhost[0], badhost[1], load("10.0.0.3:8080", 0.3, 16*time.Millisecond)}
	if slow, note := slowEndpoints(unjudged, 5, prior, then.Add(weightHold-time.Second)); len(slow) != 1 {
		t.Errorf("a second before the hold ends: %+v (%s), want it still weighted", slow, note)
	}
	if slow, note := slowEndpoints(unjudged, 5, prior, then.Add(weightHold)); len(slow) != 0 {
		t.Errorf("at the hold's end: %+v (%s), want its full weight back", slow, note)
	}
}

func TestNoEndpointWeightedWhenNoneStandsOut(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		loads []endpointLoad
		note  string
	}{
		{"all equally slow (saturation)", []endpointLoad{
			load("10.0.0.1:8080", 50, 40*time.Millisecond), load("10.0.0.2:8080", 50, 39*time.Millisecond), load("10.0.0.3:8080", 50, 41*time.Millisecond),
		}, "no endpoint answers in 2x"},
		{"1.9x the median", []endpointLoad{
			load("10.0.0.1:8080", 50, 16*time.Millisecond), load("10.0.0.2:8080", 50, 16*time.Millisecond), load("10.0.0.3:8080", 50, 30*time.Millisecond),
		}, "no endpoint answers in 2x"},
		{"two endpoints", badhost[1:], "2 endpoints: weighing one down takes 3 or more"},
		{"too few requests", []endpointLoad{
			load("10.0.0.1:8080", 0.1, 16*time.Millisecond), load("10.0.0.2:8080", 0.1, 16*time.Millisecond), load("10.0.0.3:8080", 0.1, 116*time.Millisecond),
		}, "too few requests to judge"},
		{"nothing read yet", nil, EndpointsUnread},
	} {
		slow, note := slowEndpoints(c.loads, 5, nil, now)
		if len(slow) != 0 || !strings.Contains(note, c.note) {
			t.Errorf("%s: %+v (%s), want none, saying %q", c.name, slow, note, c.note)
		}
	}
}

// At most a third of the endpoints are weighted down, the slowest first:
// the others take their load.
func TestAtMostAThirdOfTheEndpointsWeighted(t *testing.T) {
	loads := []endpointLoad{
		load("10.0.0.1:8080", 50, 16*time.Millisecond), load("10.0.0.2:8080", 50, 16*time.Millisecond),
		load("10.0.0.3:8080", 50, 16*time.Millisecond), load("10.0.0.4:8080", 50, 16*time.Millisecond),
		load("10.0.0.5:8080", 50, 90*time.Millisecond), load("10.0.0.6:8080", 50, 116*time.Millisecond),
		load("10.0.0.7:8080", 50, 100*time.Millisecond),
	}
	slow, note := slowEndpoints(loads, 5, nil, time.Now())
	var got []string
	for _, s := range slow {
		got = append(got, s.Address)
		// Two of seven slow, a 5% budget: 0.0125 x 5 x 100 / 0.975 = 6.4.
		if s.Weight != 6 {
			t.Errorf("%s: weight %d, want 6", s.Address, s.Weight)
		}
	}
	// Three are slow (the median is 16 ms); seven endpoints allow two.
	if strings.Join(got, ",") != "10.0.0.6:8080,10.0.0.7:8080" {
		t.Errorf("weighted %v (%s), want 10.0.0.6:8080 and 10.0.0.7:8080", got, note)
	}
}

// TestEndpointLoadsCountEachSeriesOverItsOwnScrapes: from the range query's
// answer, a series younger than the window counts over its age (PromQL's
// rate() divided its increase by the whole window), a counter that fell
// counts from zero again, and the proxies' loads add up.
func TestEndpointLoadsCountEachSeriesOverItsOwnScrapes(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	series := func(metric, instance string, values ...float64) *model.SampleStream {
		ss := &model.SampleStream{Metric: model.Metric{
			model.MetricNameLabel: model.LabelValue(metric), envoyClusterLabel: "tailcut_shop_api_8080",
			endpointLabel: "10.0.0.1:8080", "instance": model.LabelValue(instance),
		}}
		for i, v := range values {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t0.Add(time.Duration(i) * 15 * time.Second).UnixNano()), Value: model.SampleValue(v)})
		}
		return ss
	}
	// Proxy a appears at t0: 50 requests/s, one in flight at each scrape
	// (20 ms each). Proxy b restarts between its second and third scrape.
	m := model.Matrix{
		series(endpointTotalMetric, "a", 0, 750, 1500, 2250),
		series(endpointActiveMetric, "a", 1, 1, 1, 1),
		series(endpointTotalMetric, "b", 1000, 1750, 100, 850),
		series(endpointActiveMetric, "b", 3, 3, 3, 3),
	}
	h := endpointHistory{read: t0, byCluster: endpointScrapes(m)}
	loads := h.loads("tailcut_shop_api_8080")
	if len(loads) != 1 {
		t.Fatalf("loads %+v, want one endpoint", loads)
	}
	// a: 2250 in 45 s, 50/s. b: 750 + 100 + 750 = 1600 in 45 s, 35.6/s. In
	// flight: 1 + 3 on average, 4 + 12 seen.
	l := loads[0]
	if l.Requests != 3850 || math.Abs(l.Rate-(50+1600.0/45)) > 1e-9 || l.Active != 4 || l.InFlightSeen != 16 {
		t.Errorf("load %+v, want 3850 requests, %.4f/s, 4 in flight, 16 seen in flight", l, 50+1600.0/45)
	}
}
