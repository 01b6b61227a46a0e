//go:build localstack && chaos

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
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// Each chaos test starts its own stack on its own ports, and make test-chaos
// runs them two at a time (-parallel 2): one after the other they took 18 of
// CI's 60 minutes, mostly waiting out the faults. What they judge (errors, the
// budget over every 30 s window, the fallback's and the lease's timing) must
// hold on a busy machine anyway.

// load sends ordinary GETs through Envoy at a fixed rate and keeps every
// outcome with its time, so a test can count errors in any stretch.
type load struct {
	mu      sync.Mutex
	results []outcome
	wg      sync.WaitGroup
}

type outcome struct {
	at   time.Time
	code int // 0: the request failed
}

func startLoad(ctx context.Context, s *Stack, rps int) *load {
	l := &load{}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * rps}}
	url := "http://" + addr(s.opts.Ports.Listener) + "/"
	l.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rps))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.wg.Go(func() {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = Host()
				code := 0
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				l.mu.Lock()
				l.results = append(l.results, outcome{at: start, code: code})
				l.mu.Unlock()
			})
		}
	})
	return l
}

// count returns the requests sent in [from, to) and how many did not get a 200.
func (l *load) count(from, to time.Time) (sent, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.results {
		if !o.at.Before(from) && o.at.Before(to) {
			sent++
			if o.code != http.StatusOK {
				failed++
			}
		}
	}
	return sent, failed
}

// envoyStats reads Envoy's counters, gauges and text readouts.
func envoyStats(t *testing.T, s *Stack) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + addr(s.opts.Ports.Admin) + "/stats")
	if err != nil {
		t.Fatalf("Envoy admin: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

func num(m map[string]string, k string) int {
	n, _ := strconv.Atoi(m[k])
	return n
}

// operatorCounter sums the operator's metric series whose labels contain labels.
func operatorCounter(t *testing.T, s *Stack, name, labels string) float64 {
	t.Helper()
	v, err := metricSum(s.opts.Ports.Metrics, name, labels)
	if err != nil {
		t.Fatalf("operator metrics: %v", err)
	}
	return v
}

// xdsUpdates are Envoy's counts of configuration it took from tailcut.
func xdsUpdates(m map[string]string) map[string]int {
	hedged, bypass := plan.ClusterName(Namespace, Service, Port), plan.BypassClusterName(Namespace, Service, Port)
	return map[string]int{
		"LDS": num(m, "listener_manager.lds.update_success"),
		"CDS": num(m, "cluster_manager.cds.update_success"),
		"RDS": num(m, "http.tailcut.rds.tailcut_routes.update_success"),
		"EDS": num(m, "cluster."+hedged+".update_success") + num(m, "cluster."+bypass+".update_success"),
	}
}

// TestChaosOperatorKilledAndRestarted is #14's scenarios 1 and 2: with 300
// requests a second flowing, the operator is killed (SIGKILL) for 60 s, then
// started again. Envoy keeps its configuration: no request fails and hedges
// keep being sent while the operator is away. The restarted operator serves
// only after its first full translation, with the same versions for the same
// content, so Envoy takes nothing new.
func TestChaosOperatorKilledAndRestarted(t *testing.T) {
	t.Parallel()
	s, ctx := startStack(t, "bimodal")
	if _, err := s.ApplyPolicy(ctx, func(spec *tailcutv1alpha1.HedgePolicySpec) {
		// A static delay: the same content before and after the restart.
		spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: &metav1.Duration{Duration: 20 * time.Millisecond}}
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the policy Ready", 60*time.Second, func() (bool, string) {
		p, err := s.Policy(ctx)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionReady), fmt.Sprint(p.Status.Conditions)
	})
	hedged := "cluster." + plan.ClusterName(Namespace, Service, Port) + ".upstream_rq_retry"
	loadCtx, stopLoad := context.WithCancel(ctx)
	l := startLoad(loadCtx, s, 300)
	defer func() { stopLoad(); l.wg.Wait() }()

	t0 := time.Now()
	time.Sleep(30 * time.Second)
	before := envoyStats(t, s)
	t1 := time.Now()
	if err := s.KillOperator(); err != nil {
		t.Fatal(err)
	}
	t.Logf("operator killed %.0f s into the load", t1.Sub(t0).Seconds())
	time.Sleep(60 * time.Second)
	during := envoyStats(t, s)
	t2 := time.Now()
	if err := s.RestartOperator(ctx); err != nil {
		t.Fatal(err)
	}
	t3 := time.Now()
	t.Logf("operator restarted, ready after %.1f s", t3.Sub(t2).Seconds())
	waitFor(t, ctx, "Envoy back on the xDS stream", 30*time.Second, func() (bool, string) {
		st := envoyStats(t, s)
		return st["control_plane.connected_state"] == "1", "connected_state " + st["control_plane.connected_state"]
	})
	time.Sleep(30 * time.Second)
	after := envoyStats(t, s)
	t4 := time.Now()
	stopLoad()
	l.wg.Wait()

	type phase struct {
		name     string
		from, to time.Time
	}
	for _, ph := range []phase{{"before the kill", t0, t1}, {"operator away (60 s)", t1, t2}, {"restart and after", t2, t4}} {
		sent, failed := l.count(ph.from, ph.to)
		rate := float64(sent) / ph.to.Sub(ph.from).Seconds()
		t.Logf("%-22s %6d requests (%.0f/s), %d failed", ph.name, sent, rate, failed)
		if failed > 0 || sent == 0 {
			t.Errorf("%s: %d of %d requests failed, want none", ph.name, failed, sent)
		}
	}
	awayHedges, beforeHedges := num(during, hedged)-num(before, hedged), num(before, hedged)
	t.Logf("hedges: %d in the %.0f s before the kill, %d in the 60 s the operator was away", beforeHedges, t1.Sub(t0).Seconds(), awayHedges)
	if awayHedges <= 0 {
		t.Errorf("no hedge was sent while the operator was away: Envoy lost its configuration")
	}
	if d := during["control_plane.connected_state"]; d != "0" {
		t.Errorf("Envoy's control_plane.connected_state was %s while the operator was away, want 0 (the test killed the wrong process?)", d)
	}
	// The restarted operator answers Envoy's new stream with what it serves
	// (go-control-plane answers a stream's first request, as the client may
	// lack resources); with the same versions and content, Envoy changes
	// nothing: no listener or cluster is added, modified or removed.
	up0, up1 := xdsUpdates(before), xdsUpdates(after)
	t.Logf("Envoy's accepted xDS responses: %v before the kill, %v after the restart", up0, up1)
	for _, k := range []string{"listener_manager.listener_added", "listener_manager.listener_modified", "listener_manager.listener_removed",
		"cluster_manager.cluster_added", "cluster_manager.cluster_modified", "cluster_manager.cluster_removed"} {
		if _, ok := after[k]; !ok {
			t.Errorf("Envoy does not export %s", k)
		}
		if d := num(after, k) - num(before, k); d != 0 {
			t.Errorf("%s moved by %d across the restart, want 0 (same content)", k, d)
		}
	}
	for _, k := range []string{"cluster_manager.cds.version_text", "listener_manager.lds.version_text", "http.tailcut.rds.tailcut_routes.version_text"} {
		if before[k] != after[k] {
			t.Errorf("%s moved from %q to %q across the restart", k, before[k], after[k])
		}
	}
}

// TestChaosLeaderFailover is #14's scenario 3: two operator replicas with
// leader election, each with its own Envoy, 300 rps through the follower's
// Envoy. The leader is stopped and the policy edited at once; the edit
// reaches the follower's Envoy within 30 s, its Envoy adds, modifies or
// removes no listener or cluster, and no request fails. How soon the follower
// takes the lease depends on how the leader ends:
//   - deleted (SIGTERM, as the kubelet stops a Pod that is deleted, evicted or
//     rolled): the leader gives the lease up as it exits, and the follower
//     takes it at its next try, within two retry periods (2 s each, with
//     client-go's jitter up to 2.2 s) of the exit and within the lease
//     duration (15 s) of the SIGTERM;
//   - crashed (SIGKILL, as a lost node): nobody gives the lease up, and
//     client-go's follower counts the lease duration from when it first saw
//     the last renewal. It looks every retry period, jittered up to 2.2 x
//     (4.4 s): it may see a renewal made at the kill 4.4 s late, and take the
//     expired lease up to 4.4 s late, so 15 + 2 x 4.4 s after the kill.
func TestChaosLeaderFailover(t *testing.T) {
	t.Parallel()
	const lease, retry = 15 * time.Second, 2 * time.Second
	t.Run("deleted", func(t *testing.T) {
		leaderFailover(t, func(s *Stack) (time.Duration, error) { return s.StopOperator(10 * time.Second) }, func(exited, tookOver time.Duration) {
			if after := tookOver - exited; after > 2*retry*22/10+time.Second {
				t.Errorf("the follower took over %.1f s after the leader exited, want within two retry periods + 1 s (%s): the leader did not give the lease up", after.Seconds(), 2*retry*22/10+time.Second)
			}
			if tookOver > lease {
				t.Errorf("the follower took over %.1f s after the SIGTERM, want within the lease duration (%s)", tookOver.Seconds(), lease)
			}
		})
	})
	t.Run("crashed", func(t *testing.T) {
		leaderFailover(t, func(s *Stack) (time.Duration, error) { return 0, s.KillOperator() }, func(_, tookOver time.Duration) {
			if bound := lease + 2*retry*22/10 + time.Second; tookOver > bound {
				t.Errorf("the follower took over %.1f s after the kill, want within the lease duration + two retry periods + 1 s (%s)", tookOver.Seconds(), bound)
			}
		})
	})
}

// leaderFailover runs TestChaosLeaderFailover with one way of ending the
// leader: stop ends it and says how long it took to exit; check judges the
// take-over time, counted from the signal.
func leaderFailover(t *testing.T, stop func(*Stack) (time.Duration, error), check func(exited, tookOver time.Duration)) {
	s, ctx := startStackWithin(t, "bimodal", 10*time.Minute, func(o *Options) { o.LeaderElect = true })
	rp := ReplicaPorts{XDS: harness.Port(t), Metrics: harness.Port(t), Probe: harness.Port(t), Listener: harness.Port(t), Admin: harness.Port(t)}
	if _, err := s.ApplyPolicy(ctx, func(spec *tailcutv1alpha1.HedgePolicySpec) {
		spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: &metav1.Duration{Duration: 20 * time.Millisecond}}
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartReplica(ctx, "tailcut-b", rp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "both replicas' Envoys counted in status", 60*time.Second, func() (bool, string) {
		p, err := s.Policy(ctx)
		if err != nil || p.Status.Proxies == nil {
			return false, fmt.Sprint(err)
		}
		return p.Status.Proxies.Connected == 2 && p.Status.Proxies.Programmed == 2, fmt.Sprintf("%+v", *p.Status.Proxies)
	})
	lease := func() string {
		var l coordinationv1.Lease
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "tailcut.tailcut.io"}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	leader := lease()
	if leader == "" {
		t.Fatal("no leader election lease")
	}
	survivor := &Stack{opts: Options{Ports: Ports{Admin: rp.Admin, Listener: rp.Listener}}}
	statsOf := func() map[string]string { return envoyStats(t, survivor) }
	before := statsOf()

	loadCtx, stopLoad := context.WithCancel(ctx)
	l := startLoad(loadCtx, survivor, 300)
	defer func() { stopLoad(); l.wg.Wait() }()
	time.Sleep(20 * time.Second)
	signalled := time.Now()
	edited := make(chan error, 1)
	go func() {
		// The edit is made as the leader goes, not after it has gone.
		p, err := s.Policy(ctx)
		if err == nil {
			p.Spec.Delay.Static = &metav1.Duration{Duration: 25 * time.Millisecond}
			err = s.Client.Update(ctx, p)
		}
		edited <- err
	}()
	exited, err := stop(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-edited; err != nil {
		t.Fatal(err)
	}
	var tookOver, live time.Duration
	waitFor(t, ctx, "the follower to take the lease", 40*time.Second, func() (bool, string) {
		h := lease()
		tookOver = time.Since(signalled)
		return h != "" && h != leader, "holder " + h
	})
	waitFor(t, ctx, "the edit in the survivor's Envoy", 60*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + addr(rp.Admin) + "/config_dump?resource=dynamic_route_configs")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		live = time.Since(signalled)
		return strings.Contains(string(b), `"per_try_timeout": "0.025s"`), "per_try_timeout not 25ms yet"
	})
	time.Sleep(10 * time.Second)
	stopLoad()
	l.wg.Wait()
	after := statsOf()

	t.Logf("the leader exited %.1f s after the signal; the follower took the lease %.1f s after the signal; the edit made at the signal was in its Envoy %.1f s after", exited.Seconds(), tookOver.Seconds(), live.Seconds())
	check(exited, tookOver)
	if live > 30*time.Second {
		t.Errorf("the edit made during the hand-over was live %.1f s after the signal, want within 30 s", live.Seconds())
	}
	sent, failed := l.count(time.Time{}, time.Now())
	t.Logf("requests through the survivor's Envoy: %d, failed %d", sent, failed)
	if failed > 0 || sent == 0 {
		t.Errorf("%d of %d requests failed, want none", failed, sent)
	}
	for _, k := range []string{"listener_manager.listener_added", "listener_manager.listener_modified", "listener_manager.listener_removed",
		"cluster_manager.cluster_added", "cluster_manager.cluster_modified", "cluster_manager.cluster_removed"} {
		if d := num(after, k) - num(before, k); d != 0 {
			t.Errorf("the survivor's Envoy: %s moved by %d across the failover, want 0", k, d)
		}
	}
}

// TestChaosPrometheusDown is #14's scenario 4: Prometheus is stopped for five
// minutes, then started again. The last good delay is held (DelayDerived
// False, with the reason) until staleAfter (1 minute here), then the fallback
// applies; reconciles stay at the evaluation pace, with no error-requeue
// storm; once Prometheus is back, a delay is derived again within two
// evaluation intervals of its first scrape.
func TestChaosPrometheusDown(t *testing.T) {
	t.Parallel()
	s, ctx := startStackWithin(t, "bimodal", 15*time.Minute)
	const fallback = 40 * time.Millisecond
	if _, err := s.ApplyPolicy(ctx, func(spec *tailcutv1alpha1.HedgePolicySpec) {
		spec.Delay.Auto.Fallback = &tailcutv1alpha1.Fallback{Action: tailcutv1alpha1.FallbackStatic, Delay: &metav1.Duration{Duration: fallback}}
	}); err != nil {
		t.Fatal(err)
	}
	p, err := s.WaitReady(ctx, 100, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	good := p.Status.EffectiveDelay.Duration
	interval := p.Spec.EffectiveEvaluationInterval()
	stale := p.Spec.EffectiveAuto().StaleAfter.Duration
	loadCtx, stopLoad := context.WithCancel(ctx)
	l := startLoad(loadCtx, s, 100)
	defer func() { stopLoad(); l.wg.Wait() }()

	reconciles0 := operatorCounter(t, s, "controller_runtime_reconcile_total", `controller="hedgepolicy"`)
	errors0 := operatorCounter(t, s, "controller_runtime_reconcile_errors_total", `controller="hedgepolicy"`)
	down := time.Now()
	if err := s.StopPrometheus(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus stopped; the last good delay is %s, staleAfter %s, evaluation interval %s", good, stale, interval)

	var heldUntil, fallbackAt time.Time
	var heldReason string
	for time.Since(down) < 5*time.Minute {
		p, err := s.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived)
		d := time.Duration(0)
		if p.Status.EffectiveDelay != nil {
			d = p.Status.EffectiveDelay.Duration
		}
		since := time.Since(down)
		switch {
		case d == good && fallbackAt.IsZero():
			heldUntil = time.Now()
			if c != nil && c.Status == metav1.ConditionFalse {
				heldReason = c.Reason + ": " + c.Message
			}
		case d == fallback && p.Status.DelaySource == tailcutv1alpha1.DelaySourceFallback:
			if fallbackAt.IsZero() {
				fallbackAt = time.Now()
				t.Logf("fallback %s in force %.0f s after Prometheus stopped (%s)", fallback, since.Seconds(), p.Status.DelayReason)
			}
		default:
			t.Errorf("%.0f s into the outage: delay %s from %s (%s); want the last good %s, then the fallback %s", since.Seconds(), d, p.Status.DelaySource, p.Status.DelayReason, good, fallback)
		}
		time.Sleep(2 * time.Second)
	}
	reconciles := operatorCounter(t, s, "controller_runtime_reconcile_total", `controller="hedgepolicy"`) - reconciles0
	errs := operatorCounter(t, s, "controller_runtime_reconcile_errors_total", `controller="hedgepolicy"`) - errors0
	t.Logf("held the last good delay for %.0f s (%s); %0.f reconciles and %0.f reconcile errors in the 5 minutes", heldUntil.Sub(down).Seconds(), heldReason, reconciles, errs)
	if heldReason == "" {
		t.Errorf("DelayDerived was never False with a reason while the last good delay was held")
	}
	if fallbackAt.IsZero() {
		t.Errorf("the fallback never applied in a 5-minute outage with staleAfter %s", stale)
	} else if at := fallbackAt.Sub(down); at > stale+2*interval+5*time.Second {
		t.Errorf("the fallback applied %.0f s into the outage, want by staleAfter + two intervals (%s)", at.Seconds(), stale+2*interval)
	}
	// One evaluation per interval, and the status writes and ACKs they cause.
	if limit := 4 * (5 * time.Minute / interval); reconciles > float64(limit) || errs > 0 {
		t.Errorf("%0.f reconciles (%0.f errors) in 5 minutes, want at most %d and no errors: an error-requeue storm", reconciles, errs, limit)
	}

	if err := s.StartPrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	var recovered time.Duration
	waitFor(t, ctx, "a delay derived again", 3*time.Minute, func() (bool, string) {
		p, err := s.Policy(ctx)
		if err != nil {
			return false, err.Error()
		}
		ok := meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived) && p.Status.DelaySource == tailcutv1alpha1.DelaySourcePrometheus
		recovered = time.Since(back)
		return ok, fmt.Sprintf("%s from %s: %s", durationOrNone(p.Status.EffectiveDelay), p.Status.DelaySource, p.Status.DelayReason)
	})
	p, _ = s.Policy(ctx)
	t.Logf("derived again %.1f s after Prometheus started: %s (%s)", recovered.Seconds(), durationOrNone(p.Status.EffectiveDelay), p.Status.DelayReason)
	// Prometheus scrapes every 2 s; a delay needs the window's samples again
	// (minSamples), then an evaluation.
	if recovered > 2*interval+10*time.Second {
		t.Errorf("a delay was derived again %.1f s after Prometheus started, want within two intervals (%s) of its first scrapes", recovered.Seconds(), 2*interval)
	}
	sent, failed := l.count(down, time.Now())
	t.Logf("requests during the outage and the recovery: %d, failed %d", sent, failed)
	if failed > 0 {
		t.Errorf("%d of %d requests failed while Prometheus was away", failed, sent)
	}
}

// TestChaosBrownout is #14's scenario 6: every replica turns slow (x10), then
// fails every request (503), for two minutes each, then recovers. Hedging must
// not pile on: over every 30 s window the requests the workload receives stay
// within (1 + budget) x the client's requests (the hedge account,
// controllers/envoyconf/hedgeaccount). Envoy's retry_budget does not bound
// hedges and the operator's delay follows Prometheus seconds behind; without
// the account the window of the slowdown took +7.61%.
func TestChaosBrownout(t *testing.T) {
	t.Parallel()
	const rps = 300
	s, ctx := startStackWithin(t, "bimodal", 20*time.Minute)
	p, err := s.ApplyPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	budget := float64(p.Spec.EffectiveBudget().MaxExtraLoadPercent) / 100
	if p, err = s.WaitReady(ctx, rps, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("settled: delay %s, budget %.0f%%", durationOrNone(p.Status.EffectiveDelay), 100*budget)
	received := func() float64 {
		var sum float64
		for _, port := range s.opts.Ports.Workloads {
			v, err := metricSum(port, "workload_requests_total", "")
			if err != nil {
				t.Fatalf("workload metrics: %v", err)
			}
			sum += v
		}
		return sum
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	l := startLoad(loadCtx, s, rps)
	defer func() { stopLoad(); l.wg.Wait() }()
	phases := []struct {
		name string
		cfg  map[string]any // nil: keep the workload as it is
		for_ time.Duration
	}{
		{"baseline", nil, time.Minute},
		{"slow x10", map[string]any{"model": "bimodal", "base": "150ms", "slowProbability": 0.05, "slowExtra": "1000ms", "failProbability": 0}, 2 * time.Minute},
		{"all 503", map[string]any{"model": "bimodal", "base": "15ms", "slowProbability": 0.05, "slowExtra": "100ms", "failProbability": 1}, 2 * time.Minute},
		{"recovered", map[string]any{"model": "bimodal", "base": "15ms", "slowProbability": 0.05, "slowExtra": "100ms", "failProbability": 0}, 2 * time.Minute},
	}
	// The client's requests of a window are counted once they have all
	// finished (a request is recorded when it ends, and a slow one ends
	// seconds after it was sent); the workload's counter is read at the
	// window's edges.
	type span struct {
		phase    string
		from, to time.Time
		received float64
	}
	const window = 30 * time.Second
	var spans []span
	var slowEnd time.Time
	for _, ph := range phases {
		if ph.name == "all 503" {
			slowEnd = time.Now()
		}
		if ph.cfg != nil {
			if err := s.Shift(ctx, ph.cfg); err != nil {
				t.Fatal(err)
			}
		}
		for end := time.Now().Add(ph.for_); time.Now().Before(end); {
			from, before := time.Now(), received()
			time.Sleep(window)
			to, after := time.Now(), received()
			spans = append(spans, span{ph.name, from, to, after - before})
			p, _ := s.Policy(ctx)
			t.Logf("%-9s window %d: delay %s (%s)", ph.name, len(spans), durationOrNone(p.Status.EffectiveDelay), p.Status.DelayReason)
		}
	}
	stopLoad()
	l.wg.Wait()
	// The bar, with no slack: in every window the workload received
	// at most (1 + budget) x the client's requests. The hedge account commits
	// a hedge only while the hedges of its 30 s window stay within the
	// budget's share of the window's requests (plan.HedgeWindow).
	start, worst := spans[0].from, 0.0
	for _, sp := range spans {
		sent, failed := l.count(sp.from, sp.to)
		extra := (sp.received - float64(sent)) / float64(sent)
		worst = max(worst, extra)
		t.Logf("%-9s %3.0f-%3.0f s: client %5d (%5d not 200), workload %6.0f, extra %+6.2f%%",
			sp.phase, sp.from.Sub(start).Seconds(), sp.to.Sub(start).Seconds(), sent, failed, sp.received, 100*extra)
		if sp.received > (1+budget)*float64(sent) {
			t.Errorf("%s: the workload received %.0f requests for %d from the client in %s: %.2f%% extra, over the %.0f%% budget",
				sp.phase, sp.received, sent, sp.to.Sub(sp.from).Round(time.Second), 100*extra, 100*budget)
		}
		// A request sent in the last seconds of the slow phase may get its
		// answer, or its hedge's, from the 503 phase that follows.
		if sp.phase == "slow x10" {
			to := sp.to
			if cut := slowEnd.Add(-2 * time.Second); cut.Before(to) {
				to = cut
			}
			if _, failedInPhase := l.count(sp.from, to); failedInPhase > 0 {
				t.Errorf("%s: %d requests failed; slow replicas should only be slow", sp.phase, failedInPhase)
			}
		}
	}
	t.Logf("worst window: %+.2f%% extra against a %.0f%% budget, %d windows of 30 s at %d rps", 100*worst, 100*budget, len(spans), rps)

	// Recovery: the last window of the recovered phase has no errors, and the
	// policy derives its delay from Prometheus again.
	last := spans[len(spans)-1]
	sent, failed := l.count(last.from, last.to)
	if failed > 0 {
		t.Errorf("after recovery, %d of %d requests in the last 30 s still failed", failed, sent)
	}
	p, err = s.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived) || p.Status.DelaySource != tailcutv1alpha1.DelaySourcePrometheus {
		t.Errorf("two minutes after recovery the delay is %s from %s (%s), want one derived from Prometheus", durationOrNone(p.Status.EffectiveDelay), p.Status.DelaySource, p.Status.DelayReason)
	}
	t.Logf("recovered: delay %s (%s), last 30 s %d requests, %d not 200", durationOrNone(p.Status.EffectiveDelay), p.Status.DelayReason, sent, failed)
}
