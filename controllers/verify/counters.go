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
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tailcut/tailcut/controllers/envoyconf"
)

// counts holds cumulative counters by series: the metric name and every label
// that tells one process's series from another's. Counters are compared per
// series, never summed first: when one of several proxies restarts, its own
// counter falls to zero while the sum of all of them only dips.
type counts map[string]float64

// increase is what each series counted between two readings, summed by the
// metric name (and the label named by by, when set):
//   - a series that fell restarted in between, and counted its new value;
//   - a series new in after started in between, and counted all of it;
//   - a series gone from after is lost, and counts nothing.
func increase(before, after counts) counts {
	out := counts{}
	for key, v := range after {
		d := v
		if b, ok := before[key]; ok && v >= b {
			d = v - b
		}
		out[key] = d
	}
	return out
}

// label is a label pair as seriesKey writes it, for sum.
func label(name, value string) string { return fmt.Sprintf("%s=%q,", name, value) }

// sum adds up the series of one metric whose labels include every given
// label (made by label).
func (c counts) sum(metric string, labels ...string) float64 {
	var s float64
	for key, v := range c {
		if matches(key, metric, labels) {
			s += v
		}
	}
	return s
}

// has reports whether any series of metric has every given label.
func (c counts) has(metric string, labels ...string) bool {
	for key := range c {
		if matches(key, metric, labels) {
			return true
		}
	}
	return false
}

// matches reports whether the series key (seriesKey's) is of metric and has
// every given label.
func matches(key, metric string, labels []string) bool {
	name, rest, _ := strings.Cut(key, "{")
	if name != metric {
		return false
	}
	for _, l := range labels {
		if !strings.Contains(rest, l) {
			return false
		}
	}
	return true
}

// seriesKey names a series by its metric, its labels in order, and where it
// was read.
func seriesKey(metric string, labels map[string]string, source string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(metric)
	b.WriteString("{")
	for _, k := range keys {
		b.WriteString(label(k, labels[k]))
	}
	fmt.Fprintf(&b, "source=%q}", source)
	return b.String()
}

// A counterSource reads counters.
type counterSource interface {
	read(ctx context.Context) (counts, error)
	// settled returns once the source holds every count made up to t.
	settled(ctx context.Context, t time.Time) error
	String() string
}

// scrapeSource reads the Prometheus text format from each URL: the replicas'
// /metrics, or Envoy's admin /stats/prometheus. It is read directly, so it is
// current at once.
type scrapeSource struct {
	urls    []string
	metrics map[string]bool
	client  *http.Client
}

func (s scrapeSource) String() string { return strings.Join(s.urls, ",") }

func (s scrapeSource) settled(context.Context, time.Time) error { return nil }

func (s scrapeSource) read(ctx context.Context) (counts, error) {
	out := counts{}
	for _, u := range s.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		for name, fam := range families {
			if !s.metrics[name] {
				continue
			}
			for _, m := range fam.GetMetric() {
				out[seriesKey(name, labelsOf(m), u)] = valueOf(m)
			}
		}
	}
	return out, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// envoyAdmin reads the hedged and unhedged clusters' request and retry counters
// from each Envoy's admin endpoint.
func envoyAdmin(admins []string, clusters []string, client *http.Client) scrapeSource {
	filter := fmt.Sprintf(`^cluster\.(%s)\.upstream_rq_(total|retry)$`, strings.Join(clusters, "|"))
	s := scrapeSource{client: client, metrics: map[string]bool{envoyTotal: true, envoyRetry: true}}
	for _, a := range admins {
		s.urls = append(s.urls, strings.TrimRight(a, "/")+"/stats/prometheus?filter="+url.QueryEscape(filter))
	}
	return s
}

// The Envoy counters that give the extra load: upstream_rq_retry counts the
// hedges, upstream_rq_total every attempt (see plan.ClusterName).
const (
	envoyTotal = "envoy_cluster_upstream_rq_total"
	envoyRetry = "envoy_cluster_upstream_rq_retry"
)

// The hedge account's counters on tailcut's proxy, per policy (label
// envoyconf.AccountStatsTagName): requests it hedged late, and requests it
// turned away with no hedge.
const (
	accountLate = "tailcut_account_hedged_late"
	accountAway = "tailcut_account_turned_away"
)

// accountAdmin reads the hedge account's counters from each Envoy's admin.
func accountAdmin(admins []string, client *http.Client) scrapeSource {
	filter := `^wasmcustom\.tailcut_account\.`
	s := scrapeSource{client: client, metrics: map[string]bool{accountLate: true, accountAway: true}}
	for _, a := range admins {
		s.urls = append(s.urls, strings.TrimRight(a, "/")+"/stats/prometheus?filter="+url.QueryEscape(filter))
	}
	return s
}

// The demo workload's counters, where the Service is the demo workload.
const (
	workloadRequests    = "workload_requests_total"
	workloadAttempts    = "workload_envoy_attempts_total"
	workloadSideEffects = "workload_side_effects_total"
	workloadCache       = "workload_cache_requests_total"
)

func workloadMetrics(urls []string, client *http.Client) scrapeSource {
	return scrapeSource{urls: urls, client: client, metrics: map[string]bool{workloadRequests: true, workloadAttempts: true, workloadSideEffects: true, workloadCache: true}}
}

// promSource reads the same Envoy counters from Prometheus, one series per
// proxy (every proxy Prometheus scrapes, wherever it runs).
type promSource struct {
	api               promv1.API
	selector, scrapes string
	base              string
}

func prometheusCounters(base string, clusters []string) (promSource, error) {
	c, err := api.NewClient(api.Config{Address: base})
	if err != nil {
		return promSource{}, fmt.Errorf("prometheus URL %q: %w", base, err)
	}
	names := strings.Join(clusters, "|")
	return promSource{
		api:      promv1.NewAPI(c),
		selector: fmt.Sprintf(`{__name__=~"%s|%s",envoy_cluster_name=~"%s"}`, envoyTotal, envoyRetry, names),
		// One metric: timestamp() drops the name, and two metrics' series
		// would then clash. Both come from the same scrape.
		scrapes: fmt.Sprintf(`timestamp(%s{envoy_cluster_name=~"%s"})`, envoyTotal, names),
		base:    base,
	}, nil
}

// accountCounters reads the hedge account's counters of policy from the
// same Prometheus, settled on the same scrapes of the proxies as p.
func (p promSource) accountCounters(policy string) promSource {
	p.selector = fmt.Sprintf(`{__name__=~"%s|%s",%s=%q}`, accountLate, accountAway, envoyconf.AccountStatsTagName, policy)
	return p
}

func (p promSource) String() string { return p.base }

func (p promSource) vector(ctx context.Context, q string) (model.Vector, error) {
	return query[model.Vector](ctx, p, q)
}

// query asks Prometheus q at this moment, and wants an answer of type T (a
// vector, or a matrix for a range selector).
func query[T model.Value](ctx context.Context, p promSource, q string) (T, error) {
	var want T
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, _, err := p.api.Query(ctx, q, time.Now())
	if err != nil {
		return want, fmt.Errorf("prometheus %s: %s: %w", p.base, q, err)
	}
	got, ok := v.(T)
	if !ok {
		return want, fmt.Errorf("prometheus %s: %s: a %s, not a %T", p.base, q, v.Type(), want)
	}
	return got, nil
}

func (p promSource) read(ctx context.Context) (counts, error) {
	vec, err := p.vector(ctx, p.selector)
	if err != nil {
		return nil, err
	}
	out := counts{}
	for _, s := range vec {
		labels := map[string]string{}
		for k, v := range s.Metric {
			if k != model.MetricNameLabel {
				labels[string(k)] = string(v)
			}
		}
		out[seriesKey(string(s.Metric[model.MetricNameLabel]), labels, "prometheus")] = float64(s.Value)
	}
	return out, nil
}

// readingsSince returns each proxy's scrapes since t, in time order, as
// Prometheus stored them: the counters at each scrape, at the scrape's own
// time. Prometheus scrapes each proxy at its own moments, so the readings are
// kept by proxy (proxyReadings).
func (p promSource) readingsSince(ctx context.Context, t time.Time) (map[string][]reading, error) {
	m, err := query[model.Matrix](ctx, p, fmt.Sprintf("%s[%ds]", p.selector, int(time.Since(t)/time.Second)+1))
	if err != nil {
		return nil, err
	}
	return proxyReadings(m, t), nil
}

// proxyReadings sorts a matrix of raw samples into readings by proxy, those at
// or after since: a proxy is a series' labels but the metric's and the
// cluster's names, and its series scraped together share a timestamp. A
// proxy is named by its pod, or its instance, where the series carry them.
func proxyReadings(m model.Matrix, since time.Time) map[string][]reading {
	scrapes := map[string]map[model.Time]counts{}
	for _, series := range m {
		labels, proxy := map[string]string{}, map[string]string{}
		for k, v := range series.Metric {
			if k == model.MetricNameLabel {
				continue
			}
			labels[string(k)] = string(v)
			if k != "envoy_cluster_name" {
				proxy[string(k)] = string(v)
			}
		}
		name := proxyName(proxy)
		key := seriesKey(string(series.Metric[model.MetricNameLabel]), labels, "prometheus")
		for _, sample := range series.Values {
			if sample.Timestamp.Time().Before(since) {
				continue
			}
			if scrapes[name] == nil {
				scrapes[name] = map[model.Time]counts{}
			}
			if scrapes[name][sample.Timestamp] == nil {
				scrapes[name][sample.Timestamp] = counts{}
			}
			scrapes[name][sample.Timestamp][key] = float64(sample.Value)
		}
	}
	out := map[string][]reading{}
	for name, byTime := range scrapes {
		rs := make([]reading, 0, len(byTime))
		for at, c := range byTime {
			rs = append(rs, reading{at: at.Time(), c: c})
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].at.Before(rs[j].at) })
		out[name] = rs
	}
	return out
}

// proxyName names a proxy by its labels: its pod, its instance, or all of
// them (seriesKey's form) where it has neither.
func proxyName(labels map[string]string) string {
	for _, l := range []string{"pod", "instance"} {
		if v := labels[l]; v != "" {
			if l == "pod" && labels["namespace"] != "" {
				return labels["namespace"] + "/" + v
			}
			return v
		}
	}
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// settled waits until Prometheus has scraped every series after t, so that a
// reading taken then counts everything sent before t.
func (p promSource) settled(ctx context.Context, t time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		vec, err := p.vector(ctx, p.scrapes)
		if err == nil && len(vec) > 0 {
			oldest := float64(vec[0].Value)
			for _, s := range vec {
				oldest = min(oldest, float64(s.Value))
			}
			if oldest >= float64(t.UnixMilli())/1000 {
				return nil
			}
		}
		if err == nil && len(vec) == 0 {
			err = fmt.Errorf("no series answer %s: does it scrape the proxies?", p.scrapes)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prometheus %s had not scraped every proxy since the run ended: %v", p.base, err)
		case <-time.After(2 * time.Second):
		}
	}
}
