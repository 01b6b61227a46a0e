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
// It was counted over the whole window, scraped every 2 s (the local
// stack's scrape interval).
func load(address string, rate float64, mean time.Duration) endpointLoad {
	return loadScraped(address, rate, mean, 2*time.Second)
}

// loadScraped is load scraped every interval.
func loadScraped(address string, rate float64, mean time.Duration, interval time.Duration) endpointLoad {
	active := rate * mean.Seconds()
	scrapes := float64(endpointWindow / interval)
	return endpointLoad{Address: address, Requests: rate * endpointWindow.Seconds(), Rate: rate, Active: active,
		InFlightSeen: active * scrapes, Scrapes: scrapes}
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
		// 20 ms at 20/s: 60 seen in flight over 150 scrapes, at most
		// 20 x (60 + 2 x 7.75 + 4) / 60 = 26.5 ms, not below 1.5 x 16 ms =
		// 24 ms: it may still be slow, and was weighted a minute ago.
		{"reads 1.25x the median, unsure", weightedAt(20*time.Millisecond, 20), true},
		// 16 ms at 20/s: 48 seen, at most 16 x (48 + 13.9 + 4) / 48 =
		// 22.0 ms < 24 ms.
		{"recovered beyond doubt", weightedAt(16*time.Millisecond, 20), false},
		// 0.1/s: 30 requests in 5 minutes, too few to judge, and it was
		// weighted a minute ago.
		{"too few requests to judge", weightedAt(16*time.Millisecond, 0.1), true},
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
	for name, weighted := range map[string]endpointLoad{
		// 0.1/s: 30 requests in the window.
		"too few requests": load("10.0.0.3:8080", 0.1, 16*time.Millisecond),
		// 16 ms at 3.6/s (weight 5): 8.6 seen in flight, at most 16 x
		// (8.6 + 5.9 + 4) / 8.6 = 34.4 ms, above 1.5 x 16 ms.
		"reads fast, unsure": load("10.0.0.3:8080", 3.6, 16*time.Millisecond),
	} {
		loads := []endpointLoad{badhost[0], badhost[1], weighted}
		if slow, note := slowEndpoints(loads, 5, prior, then.Add(weightHold-time.Second)); len(slow) != 1 {
			t.Errorf("%s, a second before the hold ends: %+v (%s), want it still weighted", name, slow, note)
		}
		if slow, note := slowEndpoints(loads, 5, prior, then.Add(weightHold)); len(slow) != 0 {
			t.Errorf("%s, at the hold's end: %+v (%s), want its full weight back", name, slow, note)
		}
	}
	// Reading slow still, it stays weighted past the hold.
	stillSlow := []endpointLoad{badhost[0], badhost[1], load("10.0.0.3:8080", 3.6, 116*time.Millisecond)}
	if slow, note := slowEndpoints(stillSlow, 5, prior, then.Add(2*weightHold)); len(slow) != 1 {
		t.Errorf("still slow after the hold: %+v (%s), want it weighted", slow, note)
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
		// Scraped every 250 ms: 22 ms at 50/s is 1320 seen in flight, at
		// least 22 x (1320 - 72.7) / 1320 = 20.8 ms; the median at most 16
		// x (960 + 62 + 4) / 960 = 17.1 ms: 1.2x.
		{"1.4x the median, many seen", []endpointLoad{
			loadScraped("10.0.0.1:8080", 50, 16*time.Millisecond, 250*time.Millisecond), loadScraped("10.0.0.2:8080", 50, 16*time.Millisecond, 250*time.Millisecond),
			loadScraped("10.0.0.3:8080", 50, 22*time.Millisecond, 250*time.Millisecond),
		}, "no endpoint answers in 2x"},
		// At 15 s scrapes (20 in 5 minutes), 10/s at 16 ms and 32 ms: 3.2
		// and 6.4 seen in flight, 2x apart in their means but not beyond
		// doubt: at least 32 x (6.4 - 5.06) / 6.4 = 6.7 ms against at most
		// 16 x (3.2 + 3.58 + 4) / 3.2 = 53.9 ms.
		{"2x on few seen", []endpointLoad{
			loadScraped("10.0.0.1:8080", 10, 16*time.Millisecond, 15*time.Second), loadScraped("10.0.0.2:8080", 10, 16*time.Millisecond, 15*time.Second),
			loadScraped("10.0.0.3:8080", 10, 32*time.Millisecond, 15*time.Second),
		}, "no endpoint answers in 2x"},
	} {
		slow, note := slowEndpoints(c.loads, 5, nil, now)
		if len(slow) != 0 || !strings.Contains(note, c.note) {
			t.Errorf("%s: %+v (%s), want none, saying %q", c.name, slow, note, c.note)
		}
	}
}

// TestSlowEndpointAmongFastOnes: replicas too fast to be seen in flight
// often are known to be fast all the same; the slow one stands out at the
// chart's 15 s scrapes, and where a constant-rate client's arrivals keep
// step with the scrapes (the same count in flight at every scrape).
func TestSlowEndpointAmongFastOnes(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		loads []endpointLoad
	}{
		// 50/s at 15 ms over 20 scrapes: 15 seen in flight, at most 15 x
		// (15 + 7.75 + 4) / 15 = 26.8 ms; the slow one's 115 x 20 x 0.05 =
		// 115 seen, at least 115 x (115 - 21.4) / 115 = 93.6 ms >= 53.5 ms.
		{"15 s scrapes", []endpointLoad{
			loadScraped("10.0.0.1:8080", 50, 15*time.Millisecond, 15*time.Second), loadScraped("10.0.0.2:8080", 50, 15*time.Millisecond, 15*time.Second),
			loadScraped("10.0.0.3:8080", 50, 115*time.Millisecond, 15*time.Second),
		}},
		// 1 ms replicas: 1 seen in flight over 20 scrapes, at most 7 ms.
		{"1 ms replicas at 15 s scrapes", []endpointLoad{
			loadScraped("10.0.0.1:8080", 50, time.Millisecond, 15*time.Second), loadScraped("10.0.0.2:8080", 50, time.Millisecond, 15*time.Second),
			loadScraped("10.0.0.3:8080", 50, 101*time.Millisecond, 15*time.Second),
		}},
		// A CI run of the local stack: a constant 150/s against 2 s scrapes,
		// every scrape at the same phase, read 1, 0 and 6 in flight at all of
		// 144 scrapes. The median is the endpoint read at 20 ms, at most 20
		// x (144 + 24 + 4) / 144 = 23.9 ms; the slow one at least 120 x (864
		// - 58.8) / 864 = 111.8 ms. (Counted as before, the one seen at 0
		// left two judged and their median 70 ms.)
		{"arrivals in step with the scrapes", []endpointLoad{
			{Address: "10.0.0.1:8080", Requests: 14400, Rate: 50, Active: 1, InFlightSeen: 144, Scrapes: 144},
			{Address: "10.0.0.2:8080", Requests: 14400, Rate: 50, Active: 0, InFlightSeen: 0, Scrapes: 144},
			{Address: "10.0.0.3:8080", Requests: 14400, Rate: 50, Active: 6, InFlightSeen: 864, Scrapes: 144},
		}},
	} {
		slow, note := slowEndpoints(c.loads, 5, nil, now)
		if len(slow) != 1 || slow[0].Address != "10.0.0.3:8080" || slow[0].Weight != 5 {
			t.Errorf("%s: %+v (%s), want 10.0.0.3:8080 at weight 5", c.name, slow, note)
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
	if l.Requests != 3850 || math.Abs(l.Rate-(50+1600.0/45)) > 1e-9 || l.Active != 4 || l.InFlightSeen != 16 || l.Scrapes != 4 {
		t.Errorf("load %+v, want 3850 requests, %.4f/s, 4 in flight, 16 seen in flight over 4 scrapes", l, 50+1600.0/45)
	}
}
