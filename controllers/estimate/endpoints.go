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
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// One slow replica of three makes a third of the requests slow, far more
// than any budget of a few percent can hedge (outOfReach). tailcut owns the
// hedged cluster's endpoints in xDS mode, so it can act there instead: it
// weighs the slow endpoint down until it takes about half the budget's share
// of the requests, and hedging covers the rest (issue #26).
//
// An endpoint's mean latency comes from Little's law over Envoy's
// per-endpoint stats on the hedged cluster: the requests it has in flight on
// average (the rq_active gauge at each scrape) divided by the requests it is
// sent per second (the rq_total counter's increase between the first and the
// last scrape). Envoy keeps no latency histogram per endpoint; these two are
// enough to tell one endpoint answering in 116 ms from two in 16 ms.
//
// Once per evaluation interval the sampler reads both raw over the last
// endpointWindow, every scrape of every proxy's series with its time, in one
// query (a range selector), and counts each series over its own scrapes
// (endpointHistory): PromQL's rate() divides by the whole window while
// avg_over_time averages only the samples there are, so for a series younger
// than the window (a new pod, a new proxy) their ratio overstated the mean by
// the window over the series' age (in the local stack, 50 s after the start:
// 46 ms read for endpoints answering in 16 ms).
const (
	// endpointWindow is the span of the per-endpoint reading: 20 scrapes of
	// the in-flight gauge at the chart's 15 s scrape interval.
	endpointWindow = 5 * time.Minute
	// slowEndpointFactor: an endpoint is slow when its mean latency, at the
	// lowest its in-flight counts allow (inFlightZ), is this many times the
	// median endpoint's at the highest or more.
	slowEndpointFactor = 2.0
	// recoveredFactor: a weighted endpoint gets its weight back when its mean,
	// at the highest its in-flight counts allow, is below this many times the
	// median's. While it reads this many times the median or more it stays
	// weighted: hedges cut its slow attempts short (the hedge answers, Envoy
	// cancels the first attempt), so its mean reads lower than it is.
	recoveredFactor = 1.5
	// minEndpointRequests: an endpoint is judged on at least this many
	// requests in the window.
	minEndpointRequests = 50
	// inFlightZ bounds an endpoint's mean latency. The count in flight at a
	// scrape is about Poisson (arrivals from many clients), so the sum k over
	// the scrapes is too, and its mean lies within k - z*sqrt(k) and
	// k + z*sqrt(k) + z^2 (about 98% each way at z = 2; the z^2 keeps the
	// upper bound above zero when no request was seen in flight). An endpoint
	// is slow when its lower bound is slowEndpointFactor times the median
	// endpoint's upper bound or more, so two alike endpoints are not told
	// apart by chance, however few requests each has in flight: a fast
	// replica at 15 ms and 50/s sees 15 in flight over the 20 scrapes of 5
	// minutes at 15 s, 1 ms replicas almost none, and requiring 16 seen of
	// every endpoint (as at first) left a third of them unjudged and the
	// median among the others' (one fast, one slow) twice the fast one's.
	inFlightZ = 2.0
	// weightHold: an endpoint weighted down, and sent too little since to be
	// judged again or read as recovered beyond doubt, gets its full weight
	// back this long after it was weighted, as Envoy's outlier detection ends an ejection: if still slow,
	// the next readings weigh it down again.
	weightHold = 5 * time.Minute
	// minEndpoints: weighing down takes three endpoints or more, and at most
	// a third of them are weighted: the others take their load.
	minEndpoints = 3
)

// sampleEndpoints is the sampler's per-endpoint query, once per evaluation
// interval for every hedged cluster: every scrape of the request counter and
// the in-flight gauge in the window, one series per proxy.
var sampleEndpoints = `{__name__=~"` + endpointTotalMetric + `|` + endpointActiveMetric + `",` + envoyClusterLabel + `=~"` + hedgedClusters +
	`"}[` + promDuration(endpointWindow) + `]`

const (
	endpointTotalMetric  = "envoy_cluster_endpoint_rq_total"
	endpointActiveMetric = "envoy_cluster_endpoint_rq_active"
)

const endpointLabel = "envoy_endpoint_address"

// EndpointsUnread is Result.EndpointsNote while no per-endpoint reading has
// come for the policy's cluster: EndpointsBalanced is then Unknown.
const EndpointsUnread = "no per-endpoint reading yet"

// endpointScrape is one scrape of one proxy's stats for one endpoint.
type endpointScrape struct {
	at            time.Time
	total, active float64
}

// endpointSeries names one proxy's series for one endpoint of a cluster.
type endpointSeries struct {
	address string
	proxy   uint64 // the labels but the name (model.SignatureWithoutLabels)
}

// endpointHistory is every hedged cluster's per-endpoint scrapes over the
// window of the last reading, oldest first, and when it was read.
type endpointHistory struct {
	read      time.Time
	byCluster map[string]map[endpointSeries][]endpointScrape
}

// endpointScrapes turns the answer to sampleEndpoints into each series'
// scrapes: a counter and a gauge scraped together share a timestamp.
func endpointScrapes(m model.Matrix) map[string]map[endpointSeries][]endpointScrape {
	type key struct {
		cluster string
		id      endpointSeries
	}
	active := map[key]map[model.Time]float64{}
	for _, ss := range m {
		if ss.Metric[model.MetricNameLabel] != endpointActiveMetric {
			continue
		}
		k := key{string(ss.Metric[envoyClusterLabel]), endpointSeries{string(ss.Metric[endpointLabel]), model.SignatureWithoutLabels(ss.Metric, notProxy)}}
		at := make(map[model.Time]float64, len(ss.Values))
		for _, v := range ss.Values {
			at[v.Timestamp] = float64(v.Value)
		}
		active[k] = at
	}
	out := map[string]map[endpointSeries][]endpointScrape{}
	for _, ss := range m {
		if ss.Metric[model.MetricNameLabel] != endpointTotalMetric {
			continue
		}
		k := key{string(ss.Metric[envoyClusterLabel]), endpointSeries{string(ss.Metric[endpointLabel]), model.SignatureWithoutLabels(ss.Metric, notProxy)}}
		var scs []endpointScrape
		for _, v := range ss.Values {
			if a, ok := active[k][v.Timestamp]; ok {
				scs = append(scs, endpointScrape{at: v.Timestamp.Time(), total: float64(v.Value), active: a})
			}
		}
		if len(scs) == 0 {
			continue
		}
		if out[k.cluster] == nil {
			out[k.cluster] = map[endpointSeries][]endpointScrape{}
		}
		out[k.cluster][k.id] = scs
	}
	return out
}

// loads are the cluster's endpoints' loads over the scrapes held, each
// proxy's counted over its own scrapes and then summed: a series younger than
// the window counts over its age, and a counter that fell (a proxy's
// restart) counts from zero again.
func (h *endpointHistory) loads(cluster string) []endpointLoad {
	byAddress := map[string]*endpointLoad{}
	series := map[string]float64{}
	var order []string
	for id, scs := range h.byCluster[cluster] {
		if len(scs) < 2 {
			continue
		}
		var increase, active float64
		for i, sc := range scs {
			active += sc.active
			if i == 0 {
				continue
			}
			if d := sc.total - scs[i-1].total; d >= 0 {
				increase += d
			} else {
				increase += sc.total
			}
		}
		l := byAddress[id.address]
		if l == nil {
			l = &endpointLoad{Address: id.address}
			byAddress[id.address] = l
			order = append(order, id.address)
		}
		l.Requests += increase
		l.InFlightSeen += active
		l.Rate += increase / scs[len(scs)-1].at.Sub(scs[0].at).Seconds()
		l.Active += active / float64(len(scs))
		l.Scrapes += float64(len(scs))
		series[id.address]++
	}
	slices.Sort(order)
	out := make([]endpointLoad, 0, len(order))
	for _, a := range order {
		l := *byAddress[a]
		l.Scrapes /= series[a]
		out = append(out, l)
	}
	return out
}

// endpointLoad is one endpoint of a hedged cluster over endpointWindow.
type endpointLoad struct {
	// Address is Envoy's envoy_endpoint_address: "ip:port".
	Address string
	// Requests are the requests (attempts) counted, Rate the requests per
	// second, Active the requests in flight on average, InFlightSeen the
	// requests in flight summed over the scrapes, Scrapes the scrapes of
	// each of its series on average.
	Requests, Rate, Active, InFlightSeen, Scrapes float64
}

// mean is the endpoint's mean time per request (Little's law).
func (l endpointLoad) mean() time.Duration {
	_, mean, _ := l.meanWithin()
	return mean
}

// meanWithin is the endpoint's mean time per request and its bounds
// (inFlightZ).
func (l endpointLoad) meanWithin() (lo, mean, hi time.Duration) {
	if l.Rate <= 0 || l.Scrapes <= 0 {
		return 0, 0, 0
	}
	k := l.InFlightSeen
	scrapes := l.Scrapes
	if k > 0 {
		scrapes = k / l.Active
	}
	at := func(seen float64) time.Duration {
		return time.Duration(seen / scrapes / l.Rate * float64(time.Second))
	}
	spread := inFlightZ * math.Sqrt(k)
	return at(max(0, k-spread)), at(k), at(k + spread + inFlightZ*inFlightZ)
}

// judged says whether enough of the endpoint's requests were counted to
// judge it.
func (l endpointLoad) judged() bool {
	return l.Requests >= minEndpointRequests
}

// slowEndpoints decides which endpoints to weigh down, and their weights,
// from their loads, the budget and the endpoints weighted now (prior). It
// says why in note. With no loads (nothing read yet, or Prometheus out) it
// keeps prior.
func slowEndpoints(loads []endpointLoad, budgetPercent int32, prior []tailcutv1alpha1.SlowEndpoint, now time.Time) (slow []tailcutv1alpha1.SlowEndpoint, note string) {
	if len(loads) == 0 {
		if len(prior) > 0 {
			return prior, "no per-endpoint reading: the endpoints weighted down stay so"
		}
		return nil, EndpointsUnread
	}
	if len(loads) < minEndpoints {
		return nil, fmt.Sprintf("%d endpoints: weighing one down takes %d or more", len(loads), minEndpoints)
	}
	var judged []endpointLoad
	var total float64
	for _, l := range loads {
		total += l.Rate
		if l.judged() {
			judged = append(judged, l)
		}
	}
	if len(judged) < minEndpoints-1 {
		if len(prior) > 0 {
			return prior, "too few requests to judge the endpoints: the endpoints weighted down stay so"
		}
		return nil, fmt.Sprintf("too few requests to judge the endpoints (%d each in %s at least)", minEndpointRequests, promDuration(endpointWindow))
	}
	// The median endpoint, the lower of two in the middle: with one of three
	// weighted down and sent too few to judge, the other two.
	slices.SortFunc(judged, func(a, b endpointLoad) int { return cmp.Compare(a.mean(), b.mean()) })
	_, median, medianHi := judged[(len(judged)-1)/2].meanWithin()
	was := map[string]tailcutv1alpha1.SlowEndpoint{}
	for _, s := range prior {
		was[s.Address] = s
	}
	var candidates []endpointLoad
	for _, l := range loads {
		p, weighted := was[l.Address]
		lo, mean, hi := l.meanWithin()
		held := weighted && now.Sub(p.Since.Time) < weightHold
		switch {
		case !l.judged():
			if held {
				candidates = append(candidates, l)
			}
		case float64(lo) >= slowEndpointFactor*float64(medianHi):
			candidates = append(candidates, l)
		case !weighted, float64(hi) < recoveredFactor*float64(median):
			// Not slow, or recovered beyond doubt.
		case float64(mean) >= recoveredFactor*float64(median), held:
			// Weighted down, it reads slow still, or reads fast on too few
			// requests seen in flight to be sure: a hedge cutting its slow
			// attempts short lowers its mean too.
			candidates = append(candidates, l)
		}
	}
	// The slowest first, at most a third of the endpoints.
	slices.SortFunc(candidates, func(a, b endpointLoad) int { return int(b.mean() - a.mean()) })
	candidates = candidates[:min(len(candidates), len(loads)/minEndpoints)]
	if len(candidates) == 0 {
		return nil, fmt.Sprintf("no endpoint answers in %gx the median endpoint's mean (%s, at most %s) or more", slowEndpointFactor,
			median.Round(100*time.Microsecond), medianHi.Round(100*time.Microsecond))
	}
	w := endpointWeight(budgetPercent, len(loads), len(candidates))
	var notes []string
	for _, l := range candidates {
		s := tailcutv1alpha1.SlowEndpoint{
			Address:        l.Address,
			MeanLatency:    metav1.Duration{Duration: l.mean().Round(100 * time.Microsecond)},
			MedianLatency:  metav1.Duration{Duration: median.Round(100 * time.Microsecond)},
			RequestPercent: math.Round(1000*l.Rate/total) / 10,
			Weight:         w,
			Since:          metav1.NewTime(now.Truncate(time.Second)),
		}
		if p, ok := was[l.Address]; ok {
			s.Since = p.Since
		}
		slow = append(slow, s)
		notes = append(notes, fmt.Sprintf("%s answers in %s on average against a median of %s (%.1f%% of the requests of the last %g minutes): weight %d of %d",
			s.Address, s.MeanLatency.Duration, s.MedianLatency.Duration, s.RequestPercent, endpointWindow.Minutes(), w, plan.FullWeight))
	}
	slices.SortFunc(slow, func(a, b tailcutv1alpha1.SlowEndpoint) int { return strings.Compare(a.Address, b.Address) })
	return slow, strings.Join(notes, "; ")
}

// endpointWeight is the weight that gives each of k slow endpoints, among n,
// half the budget's share of the requests split k ways, against FullWeight
// for the others: w / (k*w + (n-k)*FullWeight) = share.
func endpointWeight(budgetPercent int32, n, k int) int32 {
	share := float64(budgetPercent) / 100 / 2 / float64(k)
	w := share * float64(n-k) * plan.FullWeight / (1 - float64(k)*share)
	return int32(max(1, min(plan.FullWeight-1, math.Floor(w))))
}
