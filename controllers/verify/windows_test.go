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

	"github.com/prometheus/common/model"
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
	w := worstStretch(readingsOf(30, 90, 60, 75), time.Unix(1000, 0), 30*time.Second, "h", "u")
	if w == nil {
		t.Fatal("no stretch")
	}
	if w.StartS != 10 || w.Seconds != 30 || w.Requests != 4500 || w.Hedges != 225 || math.Abs(w.Pct-5) > 1e-9 || w.Readings != 5 || w.Window != "30s" {
		t.Errorf("worst stretch %+v, want 225 hedges for 4500 requests (5%%), 30 s from 10 s, of 5 readings", w)
	}
	if w := worstStretch(readingsOf(30, 90), time.Unix(1000, 0), 30*time.Second, "h", "u"); w != nil {
		t.Errorf("20 s of readings gave the stretch %+v, want none", w)
	}
}

func TestWorstStretchIsTheNearestToTheBudget(t *testing.T) {
	// Hedges per 10 s: 77, 60, 60, 119. 10-40 s: 239 for 4,500 (5.31%), the
	// most per request, but a 5% budget allows it 0.05 x (4,500 + 300) = 240.
	// 0-40 s: 316 for 6,000 (5.27%), allowed 0.05 x (6,000 + 300) = 315: over.
	w := worstStretch(readingsOf(77, 60, 60, 119), time.Unix(1000, 0), 30*time.Second, "h", "u")
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

// scrapesOf is one proxy's series in Prometheus, scraped every 15 s from
// firstS seconds after time.Unix(1000, 0): each interval sends 1,500
// requests to the hedged cluster "h" and the given hedges, and 1,500 to the
// unhedged "u".
func scrapesOf(pod string, firstS int, hedges ...float64) model.Matrix {
	series := func(name, cluster string) *model.SampleStream {
		return &model.SampleStream{Metric: model.Metric{
			model.MetricNameLabel: model.LabelValue(name), "envoy_cluster_name": model.LabelValue(cluster),
			"namespace": "tailcut-system", "pod": model.LabelValue(pod), "instance": "10.0.0.1:9901",
		}}
	}
	total, retry, unhedged := series(envoyTotal, "h"), series(envoyRetry, "h"), series(envoyTotal, "u")
	var requests, retries float64
	for i := 0; i <= len(hedges); i++ {
		at := model.TimeFromUnix(1000 + int64(firstS+15*i))
		total.Values = append(total.Values, model.SamplePair{Timestamp: at, Value: model.SampleValue(requests + retries)})
		retry.Values = append(retry.Values, model.SamplePair{Timestamp: at, Value: model.SampleValue(retries)})
		unhedged.Values = append(unhedged.Values, model.SamplePair{Timestamp: at, Value: model.SampleValue(requests)})
		if i < len(hedges) {
			requests, retries = requests+1500, retries+hedges[i]
		}
	}
	return model.Matrix{total, retry, unhedged}
}

// Through Prometheus each proxy is read at its own scrapes, and judged alone.
func TestEachProxyIsJudgedAtItsOwnScrapes(t *testing.T) {
	start := time.Unix(1000, 0)
	// Proxy a, scraped at 0, 15, ... 60 s: 60 hedges per 1,500 requests, 4%
	// over any stretch. Proxy b, scraped at -8, 7, ... 52 s: 200, 40, 90, 80.
	// Its scrape at -8 s is before the run and is left out; else -8-22 s
	// (240 of 3,000, 8%) would be its worst. From 7 s on, stretches of 30 s
	// or more: 7-37 s 130 of 3,000, 22-52 s 170 of 3,000 (5.67%; a 5% budget
	// allows 0.05 x (3,000 + 2 x 100) = 160), 7-52 s 210 of 4,500.
	m := append(scrapesOf("proxy-a", 0, 60, 60, 60, 60), scrapesOf("proxy-b", -8, 200, 40, 90, 80)...)
	byProxy := proxyReadings(m, start)
	if len(byProxy) != 2 || len(byProxy["tailcut-system/proxy-a"]) != 5 || len(byProxy["tailcut-system/proxy-b"]) != 4 {
		t.Fatalf("readings by proxy: %v, want proxy-a's 5 scrapes and proxy-b's 4 from the start", byProxy)
	}
	w := worstOfProxies(byProxy, start, 30*time.Second, "h", "u")
	if w == nil || w.Proxy != "tailcut-system/proxy-b" || w.StartS != 22 || w.Seconds != 30 || w.Requests != 3000 || w.Hedges != 170 || w.Readings != 4 ||
		math.Abs(w.AllowedHedges(5)-160) > 1e-9 {
		t.Fatalf("worst stretch %+v, want proxy-b's 22-52 s: 170 hedges for 3,000 requests, 160 allowed, of 4 readings", w)
	}
	// A proxy never scraped twice 30 s apart has no stretch.
	if w := worstOfProxies(proxyReadings(scrapesOf("proxy-c", 0, 60), start), start, 30*time.Second, "h", "u"); w != nil {
		t.Errorf("15 s of scrapes gave the stretch %+v, want none", w)
	}
}

// Of proxies at the same load the report names the first by name, whatever
// order the map of proxies comes in.
func TestATieNamesTheSameProxyEveryTime(t *testing.T) {
	start := time.Unix(1000, 0)
	var m model.Matrix
	for _, pod := range []string{"proxy-c", "proxy-a", "proxy-b", "proxy-d"} {
		m = append(m, scrapesOf(pod, 0, 60, 75, 60)...)
	}
	for range 20 {
		if w := worstOfProxies(proxyReadings(m, start), start, 30*time.Second, "h", "u"); w == nil || w.Proxy != "tailcut-system/proxy-a" {
			t.Fatalf("worst stretch %+v, want proxy-a's (four proxies alike)", w)
		}
	}
}

func TestAProxyWithoutPodIsNamedByItsLabels(t *testing.T) {
	if got := proxyName(map[string]string{"instance": "127.0.0.1:9901", "job": "envoy"}); got != "127.0.0.1:9901" {
		t.Errorf("named %q, want its instance", got)
	}
	if got := proxyName(map[string]string{"job": "envoy", "zone": "a"}); got != `job="envoy",zone="a"` {
		t.Errorf("named %q, want its labels", got)
	}
}
