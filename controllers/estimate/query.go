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
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// Envoy's label for the cluster name in its Prometheus output.
const envoyClusterLabel = "envoy_cluster_name"

// InvalidQueryError says a policy's query cannot be built: its template does not
// parse or render, or the rendered PromQL does not parse. The controller reports
// it as Accepted=False with reason InvalidQuery; it is not a metrics outage.
type InvalidQueryError struct {
	// Source is the policy's estimate source.
	Source tailcutv1alpha1.EstimateSource
	// Problem names what is wrong, for example "the template does not render".
	Problem string
	// Query is the template or the rendered query the problem was found in.
	Query string
	// Err is the underlying template or parser error.
	Err error
}

func (e *InvalidQueryError) Error() string {
	q := e.Query
	if len(q) > 200 {
		q = q[:197] + "..."
	}
	if e.Err == nil {
		return fmt.Sprintf("%s query: %s (query %q)", e.Source, e.Problem, q)
	}
	return fmt.Sprintf("%s query: %s: %v (query %q)", e.Source, e.Problem, e.Err, q)
}

func (e *InvalidQueryError) Unwrap() error { return e.Err }

// querySet is how the sampler reads a policy: the PromQL queries it sends
// for the policy alone (empty strings are queries the source does not have;
// all are empty for the policies it reads in batch, sampledByCluster), and
// how to read what comes back.
type querySet struct {
	// buckets is the per-bucket increase of the latency histogram over the
	// read range, summed over instances, one series per le (Envoy, Workload).
	buckets string
	// prevBuckets is buckets for the window that ended one window ago,
	// lastBuckets for the last evaluation interval and earlierBuckets for the
	// interval before it, for the "hedging hurts" guard.
	prevBuckets    string
	lastBuckets    string
	earlierBuckets string
	// quantile is the user's query (Custom), in seconds.
	quantile string
	// retries and attempts are the hedged cluster's upstream_rq_retry and
	// upstream_rq_total increases over the read range.
	retries  string
	attempts string
	// boundScale converts bucket bounds (le) to seconds, and edge says how far
	// above its bound a bucket reaches.
	boundScale float64
	edge       bucketEdge
	// hedgeHint says what to enable when the hedge counters have no data (on
	// a mesh, they are opt-in).
	hedgeHint string
	// custom is true for a Custom query, which reads a quantile, not a
	// histogram; counters is true when the hedge counters are read.
	custom, counters bool
}

// Built-in query templates. Selector and HedgedSelector are complete label
// matchers ({a="b",...}); Range is the stretch of time one evaluation reads.
var (
	tmplBuckets  = `sum by (le) (increase({{.Metric}}_bucket{{.Selector}}[{{.Range}}]))`
	tmplPrev     = `sum by (le) (increase({{.Metric}}_bucket{{.Selector}}[{{.Window}}] offset {{.Window}}))`
	tmplLast     = `sum by (le) (increase({{.Metric}}_bucket{{.Selector}}[{{.Interval}}]))`
	tmplEarlier  = `sum by (le) (increase({{.Metric}}_bucket{{.Selector}}[{{.Interval}}] offset {{.Interval}}))`
	tmplRetries  = `sum(increase({{.RetryMetric}}{{.HedgedSelector}}[{{.Range}}]))`
	tmplAttempts = `sum(increase({{.AttemptMetric}}{{.HedgedSelector}}[{{.Range}}]))`
)

// envoyLatencyMetric is Envoy's per-cluster upstream latency histogram, in ms.
const envoyLatencyMetric = "envoy_cluster_upstream_rq_time"

// meshRouteMetric is a stat of the policy's hedged routes on an Istio mesh:
// the EnvoyFilter gives them plan.MeshHedgedStatPrefix, so their latency and
// counters are apart from the unhedged and bypass routes', which share the
// Service's outbound cluster with them.
func meshRouteMetric(ns, svc string, port int32, stat string) string {
	return plan.MeshRouteMetric(plan.MeshVirtualHost(ns, svc, port), plan.MeshHedgedStatPrefix, stat)
}

// promQLParser parses every rendered query before it is sent.
var promQLParser = parser.NewParser(parser.Options{})

// buildQueries renders and parses the queries for a policy that read the range
// (now - rng, now].
func buildQueries(policy *tailcutv1alpha1.HedgePolicy, auto *tailcutv1alpha1.AutoDelay, rng time.Duration) (querySet, error) {
	if sampledByCluster(policy, auto) {
		// The sampler's batch queries read every tailcut cluster (sampler.go):
		// Envoy's latency histogram in ms, and the hedge counters.
		return querySet{boundScale: 1e-3, edge: envoyEdge, counters: true}, nil
	}
	ns, svc, port := policy.Namespace, policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port
	window := promDuration(auto.Window.Duration)
	quantile := strconv.FormatFloat(auto.Quantile, 'g', -1, 64)

	data := map[string]any{
		"Window":         window,
		"Range":          promDuration(rng),
		"Interval":       promDuration(policy.Spec.EffectiveEvaluationInterval()),
		"HedgedSelector": selector([][2]string{{envoyClusterLabel, plan.ClusterName(ns, svc, port)}}),
		"RetryMetric":    retryMetric,
		"AttemptMetric":  attemptMetric,
	}
	var qs querySet
	mesh := policy.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishIstio
	if mesh {
		// The hedged routes' own counters, in the policy's namespace (the
		// sidecars and gateways the EnvoyFilter patches).
		data["HedgedSelector"] = selector([][2]string{{"namespace", ns}})
		data["RetryMetric"] = meshRouteMetric(ns, svc, port, "upstream_rq_retry")
		data["AttemptMetric"] = meshRouteMetric(ns, svc, port, "upstream_rq_total")
		qs.hedgeHint = fmt.Sprintf("the proxies of namespace %s export no %s: Istio before 1.23 needs the mesh's proxyStatsMatcher "+
			`to include route stats (inclusionRegexps: vhost\..*\.route\..*); until then the budget guard is off`, ns, data["AttemptMetric"])
	}
	gateway := policy.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishEnvoyGateway
	if gateway {
		// The hedged routes' own stats on the gateways' Envoys, by the stat
		// prefix the patch gives them (one per Service port, whatever the
		// Gateway's namespace).
		data["HedgedSelector"] = selector([][2]string{{plan.GatewayRouteLabel, plan.GatewayRouteStatPrefix(ns, svc, port)}})
		data["RetryMetric"] = plan.GatewayRouteMetric("upstream_rq_retry")
		data["AttemptMetric"] = plan.GatewayRouteMetric("upstream_rq_total")
		qs.hedgeHint = fmt.Sprintf("no gateway Envoy exports %s{%s=%q}: is Prometheus scraping Envoy Gateway's proxies, and did the EnvoyPatchPolicy apply (its status)?",
			data["AttemptMetric"], plan.GatewayRouteLabel, plan.GatewayRouteStatPrefix(ns, svc, port))
	}
	switch auto.Source {
	case tailcutv1alpha1.EstimateSourceEnvoy:
		// On the mesh, Envoy is the clients' sidecars: the hedged routes'
		// latency histogram, as Envoy records it for the cluster (ms,
		// truncated). At the edge, the gateway's Envoys.
		data["Metric"] = meshRouteMetric(ns, svc, port, "upstream_rq_time")
		if gateway {
			data["Metric"] = plan.GatewayRouteMetric("upstream_rq_time")
		}
		data["Selector"] = data["HedgedSelector"]
		qs.boundScale, qs.edge = 1e-3, envoyEdge
	case tailcutv1alpha1.EstimateSourceWorkload:
		metric := tailcutv1alpha1.DefaultWorkloadMetric
		var labels map[string]string
		if auto.Workload != nil {
			if auto.Workload.Metric != "" {
				metric = auto.Workload.Metric
			}
			labels = auto.Workload.Labels
		}
		pairs := [][2]string{{"namespace", ns}}
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			pairs = append(pairs, [2]string{k, labels[k]})
		}
		data["Metric"] = metric
		data["Selector"] = selector(pairs)
		// Histograms follow the base-unit convention (seconds) unless their
		// name says milliseconds.
		qs.boundScale, qs.edge = 1, exactEdge
		if strings.HasSuffix(metric, "_milliseconds") || strings.HasSuffix(metric, "_ms") {
			qs.boundScale = 1e-3
		}
	case tailcutv1alpha1.EstimateSourceCustom:
		if strings.TrimSpace(auto.Query) == "" {
			return querySet{}, &InvalidQueryError{Source: auto.Source, Problem: "source Custom needs auto.query"}
		}
		custom := map[string]any{
			"Namespace": ns, "Service": svc, "Port": port, "Quantile": quantile, "Window": window,
		}
		q, err := renderCustom(auto.Query, custom)
		if err != nil {
			return querySet{}, &InvalidQueryError{Source: auto.Source, Problem: problemOf(err), Query: auto.Query, Err: err}
		}
		if err := checkPromQL(q, false, func(expr parser.Expr) error {
			return checkNamespaced(expr, ns, []string{plan.ClusterName(ns, svc, port), plan.BypassClusterName(ns, svc, port)})
		}); err != nil {
			return querySet{}, &InvalidQueryError{Source: auto.Source, Problem: problemOf(err), Query: q, Err: err}
		}
		qs.quantile, qs.custom = q, true
	default:
		return querySet{}, &InvalidQueryError{Source: auto.Source, Problem: fmt.Sprintf("unknown source %q", auto.Source)}
	}
	type job struct {
		dst  *string
		tmpl string
	}
	var jobs []job
	if auto.Source != tailcutv1alpha1.EstimateSourceCustom {
		jobs = append(jobs, job{&qs.buckets, tmplBuckets}, job{&qs.prevBuckets, tmplPrev}, job{&qs.lastBuckets, tmplLast},
			job{&qs.earlierBuckets, tmplEarlier})
	}
	jobs = append(jobs, job{&qs.retries, tmplRetries}, job{&qs.attempts, tmplAttempts})
	for _, j := range jobs {
		q, err := render("builtin", j.tmpl, data)
		if err == nil {
			err = checkPromQL(q, true, nil)
		}
		if err != nil {
			return querySet{}, &InvalidQueryError{Source: auto.Source, Problem: problemOf(err), Query: q, Err: err}
		}
		*j.dst = q
	}
	qs.counters = true
	return qs, nil
}

// templateError and promQLError tell the stages apart for InvalidQueryError.
type templateError struct {
	problem string
	err     error
}

func (e *templateError) Error() string { return e.err.Error() }
func (e *templateError) Unwrap() error { return e.err }

func problemOf(err error) string {
	if te, ok := err.(*templateError); ok {
		return te.problem
	}
	return "the query is not valid PromQL"
}

// render executes a Go template with missingkey=error, so a misspelt variable
// is an error rather than "<no value>" in the query.
func render(name, text string, data map[string]any) (string, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", &templateError{problem: "the template does not parse", err: err}
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", &templateError{problem: "the template does not render", err: err}
	}
	return b.String(), nil
}

// checkPromQL parses a rendered query and checks it returns an instant vector
// or a scalar, the only results the estimator can read, and passes check
// when one is given.
func checkPromQL(q string, builtin bool, check func(parser.Expr) error) error {
	expr, err := promQLParser.ParseExpr(q)
	if err != nil {
		return err
	}
	switch expr.Type() {
	case parser.ValueTypeVector, parser.ValueTypeScalar:
		if check != nil {
			return check(expr)
		}
		return nil
	default:
		what := map[parser.ValueType]string{parser.ValueTypeMatrix: "a range vector", parser.ValueTypeString: "a string"}[expr.Type()]
		kind := "the query returns " + what
		if builtin {
			kind = "built-in " + kind
		}
		return &templateError{problem: kind + ", not an instant vector or scalar", err: fmt.Errorf("result type %s", expr.Type())}
	}
}

// selector renders label matchers, quoting values as PromQL strings.
func selector(pairs [][2]string) string {
	parts := make([]string, 0, len(pairs))
	for _, p := range pairs {
		parts = append(parts, p[0]+"="+strconv.Quote(p[1]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// promDuration renders a duration as PromQL writes it ("2m", "1m30s").
func promDuration(d time.Duration) string {
	return model.Duration(d).String()
}
