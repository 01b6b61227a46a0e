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

// Package verify is `tailcut verify`: an A/B run that proves, on any Service,
// that hedging shortened the tail within the policy's budget.
//
// Two arms run at one constant arrival rate (an open model: a slow answer
// never slows the offered load), at the same time, through the same proxy to
// the same pods: the hedged route, and an unhedged reference (the proxy's
// bypass route, or the Service's endpoints directly). The load comes from the
// vegeta library; the run proves its own rate from each request's send time
// against its schedule. The extra load is read from the proxies' counters on
// the hedged cluster (and from the replicas' own counters where they export
// them), and an optional POST stream shows that no non-idempotent request ran
// twice. The verdict checks every promise at once (judge).
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
)

// Options configure one run.
type Options struct {
	// URL is the hedged route: the proxy's listener and the path to request.
	URL string
	// Host is the Host header that names the Service on the proxy.
	Host string
	// Unhedged is the reference arm: ArmBypass (the same URL with the bypass
	// header) or ArmDirect (DirectURLs, round robin).
	Unhedged   string
	DirectURLs []string
	// Rate is requests per second per arm; PostRate the POSTs per second sent
	// on the hedged host (0: none).
	Rate, PostRate int
	// Settle runs both arms before the measured phase, unmeasured: a delay
	// derived at a lower rate moves with the step to Rate. Its errors and
	// extra load still count.
	Settle, Duration time.Duration
	// WaitReady bounds the wait, before anything is counted or measured, for
	// every GET target to answer below 400 on new connections (waitReady);
	// 0 sends at once.
	WaitReady time.Duration
	Criteria  Criteria
	Limits    Limits
	// BudgetPct is the policy's budget (nil: unknown, which fails the run).
	BudgetPct *float64
	// HedgedCluster and UnhedgedCluster name the proxy's clusters for the
	// Service port (plan.ClusterName, plan.BypassClusterName).
	HedgedCluster, UnhedgedCluster string
	// EnvoyAdmin lists the proxies' admin URLs; PrometheusURL reads the same
	// counters from Prometheus instead. WorkloadMetrics lists the replicas'
	// /metrics, where they export the demo workload's counters.
	EnvoyAdmin      []string
	PrometheusURL   string
	WorkloadMetrics []string
	// NotMeasured says why a source of the extra load was not read; it goes
	// to the report.
	NotMeasured []string
	// Keys, when set, gives every GET a key from a Zipf distribution (a
	// cache's clients); nil sends no key.
	Keys *Keys
	// Policy and Scenario are copied to the report.
	Policy, Scenario string
	// Log gets progress lines (nil: none).
	Log io.Writer
}

// ClustersOf names the proxy's clusters of a Service port.
func ClustersOf(namespace, service string, port int32) (hedged, unhedged string) {
	return plan.ClusterName(namespace, service, port), plan.BypassClusterName(namespace, service, port)
}

// BypassHeader selects the unhedged route on tailcut's proxy.
const BypassHeader = "x-tailcut-bypass"

func (o *Options) check() error {
	var errs []error
	if o.URL == "" || (!strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://")) {
		errs = append(errs, fmt.Errorf("--url %q: need the hedged route's http:// URL", o.URL))
	}
	if o.Host == "" {
		errs = append(errs, errors.New("--host: need the Host header that names the Service (or --policy)"))
	}
	switch o.Unhedged {
	case ArmBypass:
	case ArmDirect:
		if len(o.DirectURLs) == 0 {
			errs = append(errs, errors.New("--unhedged=direct needs --direct-urls"))
		}
	default:
		errs = append(errs, fmt.Errorf("--unhedged %q: bypass or direct", o.Unhedged))
	}
	if o.Keys != nil {
		errs = append(errs, o.Keys.check())
	}
	if o.Rate <= 0 || o.PostRate < 0 {
		errs = append(errs, fmt.Errorf("--rate %d, --post-rate %d: need a positive rate", o.Rate, o.PostRate))
	}
	if o.Duration <= 0 || o.Settle < 0 || o.WaitReady < 0 {
		errs = append(errs, fmt.Errorf("--duration %s, --settle %s, --wait-ready %s: need a positive duration", o.Duration, o.Settle, o.WaitReady))
	}
	if o.Criteria.MaxP99Ratio <= 0 {
		errs = append(errs, fmt.Errorf("--max-p99-ratio %g: need a positive ratio", o.Criteria.MaxP99Ratio))
	}
	if (len(o.EnvoyAdmin) > 0 || o.PrometheusURL != "") && o.HedgedCluster == "" {
		errs = append(errs, errors.New("reading Envoy's counters needs the cluster names: give --policy or --cluster"))
	}
	return errors.Join(errs...)
}

// logfOrNil is logf when there is a log to write to.
func (o *Options) logfOrNil() func(string, ...any) {
	if o.Log == nil {
		return nil
	}
	return o.logf
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Run sends the load, reads the counters and judges the run. An error means
// no verdict could be reached (bad options, a counter source that does not
// answer); a failed verdict is a Report with Pass false.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	streams := o.streams()
	if o.WaitReady > 0 {
		if err := waitReady(ctx, streams, o.WaitReady, o.logf); err != nil {
			return nil, err
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var envoy counterSource
	if len(o.EnvoyAdmin) > 0 {
		envoy = envoyAdmin(o.EnvoyAdmin, []string{o.HedgedCluster, o.UnhedgedCluster}, client)
	} else if o.PrometheusURL != "" {
		p, err := prometheusCounters(o.PrometheusURL, []string{o.HedgedCluster, o.UnhedgedCluster})
		if err != nil {
			return nil, err
		}
		envoy = p
	}
	var replicas counterSource
	if len(o.WorkloadMetrics) > 0 {
		replicas = workloadMetrics(o.WorkloadMetrics, client)
	}
	// The hedge account's counters say how the account spent the budget;
	// they are no promise, so a source that fails them loses no verdict.
	var account counterSource
	accountNote := ""
	switch p, viaProm := envoy.(promSource); {
	case envoy == nil:
	case o.Policy == "":
		accountNote = "not read: its counters are per policy; give --policy"
	case viaProm:
		account = p.accountCounters(o.Policy)
	default:
		account = accountAdmin(o.EnvoyAdmin, client)
	}

	// By index: a scrapeSource holds a map, and interfaces holding one do
	// not compare.
	const accountSource = 2
	sources := []counterSource{envoy, replicas, account}
	before := make([]counts, len(sources))
	for i, src := range sources {
		if src == nil {
			continue
		}
		c, err := src.read(ctx)
		if err != nil && i == accountSource {
			accountNote = fmt.Sprintf("not read before the run: %v", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading counters before the run: %w", err)
		}
		before[i] = c
	}

	// The budget holds over every stretch of the account's window: read the
	// proxies' counters every second while the load runs, where they can be
	// read at once (Prometheus holds a scrape interval's lag).
	var stretches <-chan []reading
	stopReading := func() {}
	if admin, ok := envoy.(scrapeSource); ok && before[0] != nil {
		var readCtx context.Context
		readCtx, stopReading = context.WithCancel(ctx)
		stretches = readEvery(readCtx, admin, windowStep)
	}
	started := time.Now()

	o.logf("tailcut verify: %d requests/s per arm (hedged, %s) for %s after %s of settling", o.Rate, o.Unhedged, o.Duration, o.Settle)
	samples := attack(ctx, streams, o.Settle, o.Duration, o.Limits, o.logfOrNil())
	end := time.Now()
	stopReading()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}

	r := &Report{
		URL: o.URL, Host: o.Host, Policy: o.Policy, Scenario: o.Scenario, Generator: Generator(), UnhedgedArm: o.Unhedged,
		RatePerArm: o.Rate, Duration: o.Duration.String(), Settle: o.Settle.String(),
		Arms: map[string]Arm{}, BudgetPct: o.BudgetPct, MaxP99Ratio: o.Criteria.MaxP99Ratio,
		ExtraLoad: ExtraLoad{Missing: append([]string(nil), o.NotMeasured...)},
	}
	for _, st := range streams {
		r.Arms[st.name] = armOf(samples[st.name], st.rate, o.Settle, o.Duration, o.Criteria.LateAfter)
	}
	r.Ratio = ratios(r.Hedged().Latency, r.Unhedged().Latency)

	delta, afters := make([]counts, len(sources)), make([]counts, len(sources))
	var accountMissing []string
	for i, src := range sources {
		if src == nil || before[i] == nil {
			continue
		}
		missing := &r.ExtraLoad.Missing
		if i == accountSource {
			missing = &accountMissing
		}
		if err := src.settled(ctx, end); err != nil {
			*missing = append(*missing, err.Error())
			continue
		}
		after, err := src.read(ctx)
		if err != nil {
			*missing = append(*missing, fmt.Sprintf("reading %s after the run: %v", src, err))
			continue
		}
		delta[i], afters[i] = increase(before[i], after), after
	}
	if delta[0] != nil {
		r.ExtraLoad.Envoy = envoyLoad(delta[0], envoy.String(), o.HedgedCluster, o.UnhedgedCluster)
		worst, why := runWorstStretch(ctx, envoy, stretches, started, before[0], afters[0], o.HedgedCluster, o.UnhedgedCluster)
		if r.ExtraLoad.Envoy.Worst = worst; worst == nil {
			r.ExtraLoad.Missing = append(r.ExtraLoad.Missing, fmt.Sprintf("the extra load over each stretch of %s: %s", plan.HedgeWindow, why))
		}
	}
	if delta[1] != nil {
		r.ExtraLoad.Replicas = replicaLoad(delta[1], replicas.String(), r.Hedged().Sent+r.Hedged().SettleSent)
	}
	if len(accountMissing) > 0 {
		accountNote = strings.Join(accountMissing, "; ")
	}
	if accountNote != "" || account != nil {
		r.Account = accountOf(delta[accountSource], afters[accountSource], o.Policy, r.ExtraLoad.Envoy, accountNote)
	}
	if post, ok := r.Arms[ArmPost]; ok {
		r.Posts = &Posts{Sent: post.Sent + post.SettleSent}
		if rl := r.ExtraLoad.Replicas; rl != nil {
			r.Posts.Executed = &rl.SideEffects
		}
	}
	r.Reasons = judge(r, o.Criteria)
	r.Pass = len(r.Reasons) == 0
	return r, nil
}

// streams are the hedged arm, the unhedged arm and the POSTs, each with
// independent arrivals.
func (o *Options) streams() []stream {
	host := map[string][]string{"Host": {o.Host}}
	bypass := http.Header{"Host": {o.Host}}
	bypass.Set(BypassHeader, "1")
	out := []stream{{name: ArmHedged, rate: o.Rate, arrivals: Independent, keys: o.Keys, targets: []vegetaTarget{get(o.URL, host)}}}
	switch o.Unhedged {
	case ArmBypass:
		out = append(out, stream{name: ArmBypass, rate: o.Rate, arrivals: Independent, keys: o.Keys, targets: []vegetaTarget{get(o.URL, bypass)}})
	case ArmDirect:
		direct := stream{name: ArmDirect, rate: o.Rate, arrivals: Independent, keys: o.Keys}
		path := pathOf(o.URL)
		for _, u := range o.DirectURLs {
			direct.targets = append(direct.targets, get(strings.TrimRight(u, "/")+path, nil))
		}
		out = append(out, direct)
	}
	if o.PostRate > 0 {
		post := vegetaTarget{Method: http.MethodPost, URL: o.URL, Body: []byte("{}"),
			Header: map[string][]string{"Host": {o.Host}, "Content-Type": {"application/json"}}}
		out = append(out, stream{name: ArmPost, rate: o.PostRate, arrivals: Independent, targets: []vegetaTarget{post}})
	}
	return out
}

// pathOf is the path and query of a URL: what the direct arm requests.
func pathOf(u string) string {
	rest := u[strings.Index(u, "//")+2:]
	if i := strings.Index(rest, "/"); i >= 0 {
		return rest[i:]
	}
	return "/"
}

func armOf(ss []sample, rate int, settle, duration, lateAfter time.Duration) Arm {
	settling, measured := split(ss, settle)
	a := Arm{Latency: latencyOf(measured), Scheduled: int(float64(rate) * duration.Seconds()), Sent: len(measured), SettleSent: len(settling), Lag: lagOf(ss, lateAfter)}
	a.Errors, a.ErrorKinds = errorsOf(measured)
	settleErrors, settleKinds := errorsOf(settling)
	a.SettleErrors = settleErrors
	for k, n := range settleKinds {
		if a.ErrorKinds == nil {
			a.ErrorKinds = map[string]int{}
		}
		a.ErrorKinds[k] += n
	}
	if len(measured) > 1 {
		first, last := measured[0], measured[len(measured)-1]
		if span := (last.scheduled + last.lag) - (first.scheduled + first.lag); span > 0 {
			a.AchievedRate = float64(len(measured)-1) / span.Seconds()
		}
	}
	return a
}

func ratios(h, u Latency) map[string]float64 {
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	return map[string]float64{"p50": ratio(h.P50, u.P50), "p90": ratio(h.P90, u.P90), "p95": ratio(h.P95, u.P95), "p99": ratio(h.P99, u.P99), "p999": ratio(h.P999, u.P999)}
}

func envoyLoad(d counts, source, hedged, unhedged string) *EnvoyLoad {
	attempts := d.sum(envoyTotal, label("envoy_cluster_name", hedged))
	hedges := d.sum(envoyRetry, label("envoy_cluster_name", hedged))
	e := &EnvoyLoad{Source: source, Requests: attempts - hedges, Hedges: hedges, UnhedgedRetries: d.sum(envoyRetry, label("envoy_cluster_name", unhedged))}
	if e.Requests > 0 {
		e.Pct = 100 * hedges / e.Requests
	}
	return e
}

// accountOf is what the hedge account counted of policy over the run; note
// says why it was not read. A proxy that never created the counters (Istio's
// sidecars, Envoy Gateway's proxies: no tag for the policy) has no series.
func accountOf(d, after counts, policy string, envoy *EnvoyLoad, note string) *AccountCounts {
	a := &AccountCounts{Note: note}
	if d == nil {
		return a
	}
	by := label(envoyconf.AccountStatsTagName, policy)
	if !after.has(accountLate, by) && !after.has(accountAway, by) {
		a.Note = fmt.Sprintf("the proxies export no hedge account counters of %s (Istio sidecars and Envoy Gateway proxies do not tag them by policy)", policy)
		return a
	}
	a.Read = true
	a.HedgedLate, a.TurnedAway = d.sum(accountLate, by), d.sum(accountAway, by)
	if envoy != nil && envoy.Requests > 0 {
		a.LatePct, a.TurnedAwayPct = 100*a.HedgedLate/envoy.Requests, 100*a.TurnedAway/envoy.Requests
	}
	return a
}

func replicaLoad(d counts, source string, hedgedSent int) *ReplicaLoad {
	rl := &ReplicaLoad{
		Source:        source,
		Requests:      d.sum(workloadRequests),
		ExtraAttempts: d.sum(workloadAttempts) - d.sum(workloadAttempts, label("attempt", "1")),
		SideEffects:   d.sum(workloadSideEffects),
		CacheHits:     d.sum(workloadCache, label("result", "hit")),
		CacheLookups:  d.sum(workloadCache),
	}
	if hedgedSent > 0 {
		rl.Pct = 100 * rl.ExtraAttempts / float64(hedgedSent)
	}
	return rl
}
