//go:build localstack

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

package localstack

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/dashboards"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// freePorts reserves loopback ports through test/harness, so the e2e runs beside a demo
// and other tests.
func freePorts(t *testing.T) Ports {
	t.Helper()
	p, err := ReservePorts()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor waits for cond, giving up at once when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	harness.Eventually(t, timeout, what, func() (bool, string) {
		if err := ctx.Err(); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return cond()
	})
}

func startStack(t *testing.T, scenario string) (*Stack, context.Context) {
	t.Helper()
	return startStackWithin(t, scenario, 10*time.Minute)
}

// startStackWithin starts the stack for a test that lasts at most timeout.
func startStackWithin(t *testing.T, scenario string, timeout time.Duration, options ...func(*Options)) (*Stack, context.Context) {
	t.Helper()
	sc, err := LookupScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	dir, err := os.MkdirTemp("", "tailcut-e2e-"+scenario+"-")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Dir: dir, Ports: freePorts(t), Scenario: sc, Log: t.Logf}
	for _, o := range options {
		o(&opts)
	}
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("logs kept in %s", dir)
		}
	})
	return s, ctx
}

// TestHedgingShortensTheTail runs about 10k requests per arm through the bimodal
// workload (15ms, 4% +100ms: a point under the 5% budget, see Scenarios) and
// checks the claims tailcut makes, with margins. The unhedged arm is the
// bypass route of the same Envoy, which the estimator never reads.
func TestHedgingShortensTheTail(t *testing.T) {
	s, ctx := startStack(t, "bimodal4")
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitReady(ctx, 150, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	// Closed loop: while the A/B runs with hedging on, record the delay.
	series := s.recordDelays(ctx, time.Second)
	r, policy, err := s.RunAB(ctx, ABOptions{Rate: 170, Duration: time.Minute, MaxP99Ratio: 0.5, PostRate: 10})
	if err != nil {
		t.Fatal(err)
	}
	delays := series()
	t.Logf("closed-loop delay series: %s", delays)
	for _, d := range delays {
		if d.delay < 15*time.Millisecond || d.delay > 60*time.Millisecond {
			t.Errorf("delay %v at %s left [15ms, 60ms]: above the fast mode, well below the slow mode", d.delay, d.at)
		}
	}
	logTable(t, r)
	checkPromises(t, r, 0.5)
	checkEvenEndpoints(ctx, t, s, policy)
	checkDashboards(ctx, t, s)
}

// TestOrdinaryTraffic is what production sees: clients that send plain
// requests through tailcut's Envoy, nothing else. The unhedged tail is
// measured in the same run by a second arm that calls the replicas
// directly, as clients would without tailcut. Then the service gets slower
// (the fast mode moves from 15 to 40ms, as after a deploy) and faster again,
// and the delay follows both ways.
func TestOrdinaryTraffic(t *testing.T) {
	s, ctx := startStack(t, "bimodal4")
	created := time.Now()
	policy, err := s.ApplyPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	interval := policy.Spec.EffectiveEvaluationInterval()
	series := s.recordDelays(ctx, time.Second)
	if _, err := s.WaitReady(ctx, 150, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	r, p, err := s.RunAB(ctx, ABOptions{Rate: 170, Duration: time.Minute, MaxP99Ratio: 0.5, PostRate: 10, Unhedged: verify.ArmDirect})
	if err != nil {
		t.Fatal(err)
	}
	logTable(t, r)
	checkPromises(t, r, 0.5)
	settling := series()
	t.Logf("delay series from the policy's creation: %s", settling)

	// The delay: derived from ordinary traffic within minSamples at 150 rps
	// plus an evaluation and two scrapes, settled within 3 evaluations of that,
	// above the fast mode the direct arm measured, far below the slow one.
	first, settled, mode, held := settling.settle()
	minSamples := time.Duration(float64(policy.Spec.Delay.Auto.MinSamples) / 150 * float64(time.Second))
	t.Logf("first delay %s after the policy was created; settled at %s %s after that, and held it %.0f%% of the time (evaluation interval %s)",
		first.Sub(created).Round(100*time.Millisecond), mode, settled.Sub(first).Round(100*time.Millisecond), 100*held, interval)
	// Issue #11: from first traffic to a settled delay within 4 evaluation
	// intervals once minSamples are in, plus one 2s scrape: the estimator
	// cannot read what Prometheus has not scraped. The first delay comes
	// about 2 intervals in. It is read with hedging off from a few hundred
	// requests and allows three standard errors (concepts.md), so it may
	// land a bucket low; the budget guard then raises it once the share
	// past it is significant at the new delay, and each evaluation reads
	// only the time since the change: 2 intervals more. With 3 intervals
	// the test failed in CI when the first delay took the 17 ms bucket (p95
	// of 300 requests; 18.7 ms, raised to 23.1 ms at +20.1s). Held as in
	// the closed-loop tests: when the A/B doubles the load beside a CPU
	// burner, the fast mode widens and the budget guard raises the delay
	// for up to a window (14s of 90 in one such run), as it must.
	if limit := minSamples + 4*interval + 2*time.Second; settled.Sub(created) > limit || held < 0.8 {
		t.Errorf("the delay reached %s %s after the first traffic and held it %.0f%% of the time, want within %s (minSamples, 4 intervals, a scrape) and 80%%",
			mode, settled.Sub(created), 100*held, limit)
	}
	d := p.Status.EffectiveDelay
	if d == nil || d.Duration.Seconds()*1000 < r.Unhedged().P50 || d.Duration > 40*time.Millisecond {
		t.Errorf("delay %v, want above the fast mode (direct p50 %.1fms) and below 40ms", d, r.Unhedged().P50)
	}
	// status.hedgeRate is Prometheus's reading of one window (a binomial
	// share of a few thousand requests, extrapolated by increase()), hence
	// the point of slack; the count at the replicas is held to the budget
	// itself in checkPromises.
	if h := p.Status.HedgeRate; h == nil || h.Percent > float64(h.BudgetPercent)+1 {
		t.Errorf("status hedge rate %+v, want at most the budget + 1 point", h)
	}

	// The shift: ordinary traffic goes on; the delay rises above the new fast
	// mode within 2 evaluations (plus a scrape), and comes back after.
	shiftCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	go s.warmup(shiftCtx, 150)
	during := s.recordDelays(ctx, time.Second)
	shifted := time.Now()
	if err := s.Shift(ctx, bimodal(40, demoSlowShare)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * interval)
	unshifted := time.Now()
	if err := s.Shift(ctx, bimodal(15, demoSlowShare)); err != nil {
		t.Fatal(err)
	}
	window := policy.Spec.Delay.Auto.Window.Duration
	time.Sleep(window + 5*interval)
	stopTraffic()
	shift := during()
	t.Logf("delay series across the shift (15 -> 40ms at +0s, back at +%s): %s%s", unshifted.Sub(shifted).Round(time.Second), shift.since(shifted), shift.since(shifted).reasons())
	up, ok := shift.firstAtLeast(shifted, 42*time.Millisecond)
	if !ok || up.Sub(shifted) > 2*interval+3*time.Second {
		// Every evaluation's reason, not only the changes': which one held
		// the delay, and why.
		t.Errorf("the delay reached 42ms %s after the shift (reached: %v), want within 2 evaluation intervals and a scrape; the status until then:%s",
			up.Sub(shifted), ok, shift.since(shifted).until(shifted.Add(2*interval+3*time.Second)).everyReason())
	}
	if off := shift.offBetween(up, unshifted); off > 0 {
		t.Errorf("hedging was off for %d samples during the shift: following it means hedging on", off)
	}
	// Back by the last two intervals' reading (estimate/recent.go), not
	// once the shifted stretch has left the window: two intervals to read
	// the fast mode alone, a step down, Envoy's and Prometheus' seconds of
	// lag. Without it the delay came back 35s after (window 30s). Back is
	// within the deadband above the highest delay held for the same traffic
	// before the shift: the estimator holds any delay that close, and for
	// one traffic it moves between adjacent buckets. One CI run held 20.9,
	// 23.1 and 18.7ms before the shift and came back to 20.9ms; measured
	// from the last of them alone, 18.7ms, that was not back.
	pre := shift.since(shifted)
	if len(pre) == 0 {
		t.Fatal("no delay sampled across the shift")
	}
	before := pre[0].delay
	for _, d := range settling.since(settled) {
		before = max(before, d.delay)
	}
	back := time.Duration(float64(before) * (1 + float64(p.Spec.Delay.Auto.DeadbandPercent)/100))
	down, ok := shift.firstBelow(unshifted, back+time.Microsecond)
	if !ok || down.Sub(unshifted) > 5*interval+3*time.Second {
		t.Errorf("the delay came back to %s or less (%s, the highest held before the shift, and the deadband) %s after the shift ended (came back: %v), want within 5 evaluation intervals and a scrape (window %s)",
			back, before, down.Sub(unshifted), ok, window)
	}
}

// checkPromises checks every promise of one A/B run with margins, from the
// figures themselves: the tail, the budget, errors, the generator's rate and
// duplicated POSTs. The verifier's verdict checks the same promises; both
// must hold.
func checkPromises(t *testing.T, r Report, maxP99Ratio float64) {
	t.Helper()
	unhedged, hedged := r.Unhedged(), r.Hedged()
	if unhedged.Count < 9000 || hedged.Count < 9000 {
		t.Errorf("only %v %s and %v hedged samples; p99 needs about 10k per arm", unhedged.Count, r.UnhedgedArm, hedged.Count)
	}
	if hedged.P99 > maxP99Ratio*unhedged.P99 {
		t.Errorf("hedged p99 %.1fms > %g x %s p99 %.1fms", hedged.P99, maxP99Ratio, r.UnhedgedArm, unhedged.P99)
	}
	if hedged.P50-unhedged.P50 > 3 {
		t.Errorf("hedging added %.1fms at p50 (more than 3ms)", hedged.P50-unhedged.P50)
	}
	if r.ExtraLoad.Envoy == nil || r.ExtraLoad.Replicas == nil {
		t.Errorf("extra load not measured by both Envoy and the replicas: %+v", r.ExtraLoad)
	} else if budget := *r.BudgetPct; r.ExtraLoadPct() > budget || r.ExtraLoad.Envoy.Pct < 0 {
		t.Errorf("extra load %.2f%% (Envoy) and %.2f%% (replicas), want in [0, budget %v%%]", r.ExtraLoad.Envoy.Pct, r.ExtraLoad.Replicas.Pct, budget)
	}
	if n := r.Errors(); n != 0 {
		t.Errorf("%d requests failed", n)
	}
	for name, a := range r.Arms {
		if a.Lag.Late*100 > a.Sent+a.SettleSent {
			t.Errorf("%s: %d of %d requests sent 10ms or more late: the run is invalid", name, a.Lag.Late, a.Sent+a.SettleSent)
		}
	}
	if p := r.Posts; p != nil && (p.Executed == nil || *p.Executed != float64(p.Sent)) {
		t.Errorf("%d POSTs sent, %v reached the backends: a POST was duplicated or lost", p.Sent, p.Executed)
	}
	if !r.Pass {
		t.Errorf("the verdict failed: %v", r.Reasons)
	}
}

// chartDashboards is the chart's Grafana dashboards' directory.
var chartDashboards = filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards")

// dashboardQueries returns the stack's Prometheus API and the values of the
// dashboards' variables for the stack's policy, as Grafana would set them.
func dashboardQueries(t *testing.T, s *Stack) (promv1.API, map[string]string) {
	t.Helper()
	c, err := promapi.NewClient(promapi.Config{Address: "http://" + addr(s.opts.Ports.Prometheus)})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(c), map[string]string{
		"__rate_interval": "1m", "__interval": "30s", "__range": "1h", "datasource": "prometheus",
		"policy": Namespace + "/" + PolicyName, "cluster": plan.ClusterName(Namespace, Service, Port),
		"mesh_routes": "", // a policy on tailcut's proxy: the variable has no value
	}
}

// checkDashboards runs every query of the chart's Grafana dashboards against the
// stack's Prometheus right after traffic flowed, and fails on a query that
// returns no data, but those dashboards.MayBeEmpty allows.
func checkDashboards(ctx context.Context, t *testing.T, s *Stack) {
	t.Helper()
	prom, values := dashboardQueries(t, s)
	ran, failures, err := dashboards.CheckQueries(ctx, prom, chartDashboards, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if ran == 0 {
		t.Fatal("the chart's dashboards have no queries")
	}
	t.Logf("ran %d dashboard queries against Prometheus", ran)
}

// TestSaturationBacksOff runs the saturation workload, where extra requests only
// add queueing: whatever tailcut does, the hedged tail must not be much worse
// than the unhedged one, and the extra load stays within the budget.
func TestSaturationBacksOff(t *testing.T) {
	s, ctx := startStack(t, "saturation")
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first, err := s.WaitReady(ctx, 150, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, policy, err := s.RunAB(ctx, ABOptions{Rate: 150, Duration: time.Minute, MaxP99Ratio: 1.1})
	if err != nil {
		t.Fatal(err)
	}
	logTable(t, r)
	t.Logf("delay before the run: %v (%s); after: %v (%s): %s", first.Status.EffectiveDelay, first.Status.DelaySource,
		policy.Status.EffectiveDelay, policy.Status.DelaySource, policy.Status.DelayReason)
	checkPromises(t, r, 1.1)
	checkEvenEndpoints(ctx, t, s, policy)
}

// checkEvenEndpoints: where every replica runs the same workload, no
// endpoint is ever weighted down: the policy says EndpointsBalanced True at
// the end, and no SlowEndpoint event was recorded on the way.
func checkEvenEndpoints(ctx context.Context, t *testing.T, s *Stack, policy *tailcutv1alpha1.HedgePolicy) {
	t.Helper()
	c := meta.FindStatusCondition(policy.Status.Conditions, tailcutv1alpha1.ConditionEndpointsBalanced)
	if c == nil || c.Status != metav1.ConditionTrue || len(policy.Status.SlowEndpoints) > 0 {
		t.Errorf("EndpointsBalanced %+v, slow endpoints %+v: want True, none, with replicas alike", c, policy.Status.SlowEndpoints)
	} else {
		t.Logf("EndpointsBalanced=True: %s", c.Message)
	}
	var evs eventsv1.EventList
	if err := s.Client.List(ctx, &evs, client.InNamespace(Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == tailcutv1alpha1.ReasonSlowEndpoint {
			t.Errorf("an endpoint was weighted down with replicas alike: %s", e.Note)
		}
	}
}

func logTable(t *testing.T, r Report) {
	t.Helper()
	var table strings.Builder
	r.PrintTable(&table)
	t.Log(table.String())
}

// delaySample is the policy's delay at one moment (0: hedging off).
type delaySample struct {
	at     time.Time
	delay  time.Duration
	reason string // status.delayReason
}

type delaySeries []delaySample

// String shows the series compactly: each change with its time since the first sample.
func (ds delaySeries) String() string {
	var b strings.Builder
	for i, d := range ds {
		if i == 0 || d.delay != ds[i-1].delay {
			fmt.Fprintf(&b, "+%s:%s ", d.at.Sub(ds[0].at).Round(time.Second), d.delay)
		}
	}
	return strings.TrimSpace(b.String())
}

// reasons lists each change with the reason status gave for it.
func (ds delaySeries) reasons() string {
	var b strings.Builder
	for i, d := range ds {
		if i == 0 || d.delay != ds[i-1].delay {
			fmt.Fprintf(&b, "\n  +%s %s: %s", d.at.Sub(ds[0].at).Round(time.Second), d.delay, d.reason)
		}
	}
	return b.String()
}

// everyReason is each distinct status reason in turn: one per evaluation.
func (ds delaySeries) everyReason() string {
	var b strings.Builder
	for i, d := range ds {
		if i == 0 || d.reason != ds[i-1].reason {
			fmt.Fprintf(&b, "\n  +%s %s: %s", d.at.Sub(ds[0].at).Round(100*time.Millisecond), d.delay, d.reason)
		}
	}
	return b.String()
}

// until is the samples before t.
func (ds delaySeries) until(t time.Time) delaySeries {
	for i, d := range ds {
		if !d.at.Before(t) {
			return ds[:i]
		}
	}
	return ds
}

func (ds delaySeries) since(t time.Time) delaySeries {
	for i, d := range ds {
		if !d.at.Before(t) {
			return ds[i:]
		}
	}
	return nil
}

// settle finds when hedging first started, the delay held most often (give or
// take 15%: adjacent histogram buckets are up to 12% apart), when it was first
// reached, and the share of the time after that it was held. A loop that
// reacts to a real breach of the budget for an interval still counts as
// settled.
func (ds delaySeries) settle() (first, reached time.Time, mode time.Duration, held float64) {
	near := func(d, m time.Duration) bool { return m > 0 && math.Abs(float64(d-m)) <= 0.15*float64(m) }
	best := 0
	for _, a := range ds {
		n := 0
		for _, b := range ds {
			if near(b.delay, a.delay) {
				n++
			}
		}
		if n > best {
			best, mode = n, a.delay
		}
	}
	in, total := 0, 0
	for _, d := range ds {
		if d.delay > 0 && first.IsZero() {
			first = d.at
		}
		if reached.IsZero() && near(d.delay, mode) {
			reached = d.at
		}
		if !reached.IsZero() {
			total++
			if near(d.delay, mode) {
				in++
			}
		}
	}
	if total > 0 {
		held = float64(in) / float64(total)
	}
	return first, reached, mode, held
}

func (ds delaySeries) firstAtLeast(after time.Time, d time.Duration) (time.Time, bool) {
	for _, s := range ds.since(after) {
		if s.delay >= d {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (ds delaySeries) firstBelow(after time.Time, d time.Duration) (time.Time, bool) {
	for _, s := range ds.since(after) {
		if s.delay > 0 && s.delay < d {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (ds delaySeries) offBetween(from, to time.Time) int {
	n := 0
	for _, s := range ds.since(from) {
		if s.at.After(to) {
			break
		}
		if s.delay == 0 {
			n++
		}
	}
	return n
}

// recordDelays samples the policy's effective delay every interval until the
// returned function is called, which returns the samples.
func (s *Stack) recordDelays(ctx context.Context, interval time.Duration) func() delaySeries {
	ctx, cancel := context.WithCancel(ctx)
	var series delaySeries
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if p, err := s.Policy(ctx); err == nil {
				var d time.Duration
				if p.Status.EffectiveDelay != nil {
					d = p.Status.EffectiveDelay.Duration
				}
				series = append(series, delaySample{at: time.Now(), delay: d, reason: p.Status.DelayReason})
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
	return func() delaySeries {
		cancel()
		<-done
		return series
	}
}
