//go:build e2e

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

// Package e2e checks tailcut installed by Helm in a real cluster: hack/kind-e2e.sh
// creates a kind cluster, installs prometheus-operator, a Prometheus and the
// chart with its demo, and runs these tests (go test -tags e2e ./test/e2e).
// They wait for the demo HedgePolicy to be Ready with a delay derived from
// Prometheus and programmed into Envoy, run the Helm test (tailcut verify), print
// the same A/B table as `make demo`, fail when the tail did not get shorter,
// check that Prometheus scrapes every ServiceMonitor of the chart, and run
// every dashboard query against Prometheus.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/dashboards"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

// settings come from hack/kind-e2e.sh.
type settings struct {
	namespace, release, monitoring, artifacts, helm string
}

func load(t *testing.T) settings {
	t.Helper()
	s := settings{
		namespace:  os.Getenv("E2E_NAMESPACE"),
		release:    os.Getenv("E2E_RELEASE"),
		monitoring: os.Getenv("E2E_MONITORING_NAMESPACE"),
		artifacts:  os.Getenv("E2E_ARTIFACTS"),
		helm:       os.Getenv("HELM_BIN"),
	}
	if s.namespace == "" || s.release == "" || s.monitoring == "" || s.helm == "" {
		t.Fatal("run the e2e with hack/kind-e2e.sh (make kind-e2e): E2E_NAMESPACE, E2E_RELEASE, E2E_MONITORING_NAMESPACE and HELM_BIN are not set")
	}
	if s.artifacts == "" {
		s.artifacts = t.TempDir()
	}
	return s
}

// The demo policy and the workload are named after the chart's default
// demo.workload.name.
const policyName = "workload"

func TestKind(t *testing.T) {
	s := load(t)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	var policy *tailcutv1alpha1.HedgePolicy
	ok := t.Run("policy Ready with a delay from Prometheus", func(t *testing.T) {
		policy = waitForPolicy(ctx, t, c, s.namespace)
	})
	if !ok {
		t.FailNow()
	}

	t.Run("helm test (tailcut verify): the hedged tail is shorter", func(t *testing.T) {
		// The warm-up Job's traffic would count at the backends: stop it. The
		// delay stays (the policy's staleAfter covers the gap).
		warmup := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.release + "-warmup"}}
		if err := c.Delete(ctx, warmup, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			t.Fatalf("deleting the warm-up Job: %v", err)
		}
		started := time.Now()
		stopWatch := watchDelay(ctx, t, c, client.ObjectKeyFromObject(policy))
		// As the README and NOTES.txt tell users: --logs prints the table.
		out, helmErr := exec.CommandContext(ctx, s.helm, "test", s.release, "-n", s.namespace, "--timeout", "15m", "--logs").CombinedOutput()
		changes := stopWatch()
		t.Logf("helm test:\n%s", out)
		t.Logf("delay during the A/B: %s", strings.Join(changes, ", "))
		logs := podLogs(ctx, t, cs, s.namespace, s.release+"-verify")
		if err := os.WriteFile(filepath.Join(s.artifacts, "verify.log"), []byte(logs), 0o644); err != nil {
			t.Fatal(err)
		}
		vr := reportJSON(t, logs)
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
			t.Fatal(err)
		}
		report := localstack.NewReport(vr, policy)
		report.PrintTable(os.Stdout)
		if err := report.Write(s.artifacts); err != nil {
			t.Errorf("writing the report: %v", err)
		}
		if !report.Pass {
			t.Errorf("verdict FAIL: %v; the delay during the A/B: %s; at the end: %s", report.Reasons, strings.Join(changes, ", "), policy.Status.DelayReason)
		}
		// The verdict's own checks, again from the figures.
		if b, h := report.Unhedged().P99, report.Hedged().P99; !(h <= 0.5*b) {
			t.Errorf("hedged p99 %.1f ms is not <= 0.5 x bypass p99 %.1f ms", h, b)
		}
		if report.ExtraLoad.Envoy == nil || report.ExtraLoad.Replicas == nil {
			t.Errorf("extra load not measured by Envoy's counters and the replicas': %+v", report.ExtraLoad)
		} else if budget := float64(policy.Spec.EffectiveBudget().MaxExtraLoadPercent); report.ExtraLoadPct() > budget {
			t.Errorf("extra load %.2f%% (Envoy) and %.2f%% (replicas), want at most the budget %v%%", report.ExtraLoad.Envoy.Pct, report.ExtraLoad.Replicas.Pct, budget)
		} else if w := report.ExtraLoad.Envoy.Worst; w == nil {
			t.Errorf("the extra load over each stretch of 30 s was not read from the proxies' scrapes: %q", report.ExtraLoad.Missing)
		} else if w.Hedges > w.AllowedHedges(budget) {
			t.Errorf("proxy %s: %.0f hedges over %.1f s, more than the %.1f the budget allows", w.Proxy, w.Hedges, w.Seconds, w.AllowedHedges(budget))
		}
		if n := report.Errors(); n > 0 {
			t.Errorf("%d requests failed", n)
		}
		if p := report.Posts; p == nil || p.Executed == nil || *p.Executed != float64(p.Sent) {
			t.Errorf("POSTs: %+v, want every one sent and executed once", p)
		}
		if helmErr != nil {
			t.Errorf("helm test: %v", helmErr)
		}
		// kubectl describe hp shows the verdict: an Event on the policy.
		ev := recordedVerdict(ctx, t, cs, s.namespace, started)
		t.Logf("Event on hedgepolicy %s: %s %s: %s", policyName, ev.Type, ev.Reason, ev.Message)
		if report.Pass != (ev.Reason == verify.ReasonVerifyPassed) {
			t.Errorf("the recorded Event says %s, the report pass=%v", ev.Reason, report.Pass)
		}
	})

	prom := prometheus(t, cfg, s.monitoring)
	t.Run("Prometheus scrapes every ServiceMonitor of the chart", func(t *testing.T) {
		checkTargets(ctx, t, c, prom, s.namespace)
	})
	t.Run("every dashboard query returns data", func(t *testing.T) {
		checkDashboards(ctx, t, prom, s)
	})
}

// waitForPolicy waits until the demo policy is Ready with a delay derived from
// Prometheus (the warm-up Job sends the traffic it is derived from), settled,
// and an Envoy proxy acknowledged its configuration.
func waitForPolicy(ctx context.Context, t *testing.T, c client.Client, ns string) *tailcutv1alpha1.HedgePolicy {
	t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	last := ""
	for {
		var p tailcutv1alpha1.HedgePolicy
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policyName}, &p)
		line := fmt.Sprint(err)
		if err == nil {
			ready := meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionReady)
			programmed := meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionProgrammed)
			acked := p.Status.Proxies != nil && p.Status.Proxies.Programmed > 0
			line = fmt.Sprintf("Ready=%v Programmed=%v proxies=%s source=%s delay=%s hedgeRate=%s settled=%v",
				ready, programmed, proxies(p.Status.Proxies), p.Status.DelaySource, delay(p.Status.EffectiveDelay), hedgeRate(p.Status.HedgeRate), localstack.Settled(&p))
			settled := localstack.Settled(&p)
			if ready && programmed && acked && settled && p.Status.DelaySource == tailcutv1alpha1.DelaySourcePrometheus {
				t.Logf("policy %s/%s: %s: %s", ns, policyName, line, p.Status.DelayReason)
				return &p
			}
		}
		if line != last {
			t.Logf("waiting for the policy: %s", line)
			last = line
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy was not Ready with a delay from Prometheus within 8 minutes; last: %s", last)
		}
		time.Sleep(5 * time.Second)
	}
}

// hedgeRate formats the measured hedge rate and the delay it was measured at.
func hedgeRate(r *tailcutv1alpha1.HedgeRateObservation) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%.2f%%@%s", r.Percent, delay(r.Delay))
}

// proxies formats the proxy counts as programmed/connected.
func proxies(c *tailcutv1alpha1.ProxyCounts) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%d/%d", c.Programmed, c.Connected)
}

// delay formats a delay from status; nil is hedging off.
func delay(d *metav1.Duration) string {
	if d == nil {
		return "off"
	}
	return d.Duration.String()
}

// watchDelay records every effective delay the policy shows until the
// returned function is called, so a verdict can be read against the delays
// that were in force: a delay that moves during the A/B measures a mix.
func watchDelay(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var changes []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		start, last := time.Now(), ""
		for {
			var p tailcutv1alpha1.HedgePolicy
			if err := c.Get(ctx, key, &p); err == nil {
				d := fmt.Sprintf("%s %s %s", delay(p.Status.EffectiveDelay), p.Status.DelaySource, derivedReason(&p))
				if d != last {
					changes = append(changes, fmt.Sprintf("+%s %s (hedge rate %s)", time.Since(start).Round(time.Second), d, hedgeRate(p.Status.HedgeRate)))
					last = d
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		return changes
	}
}

// derivedReason is the reason of the DelayDerived condition.
func derivedReason(p *tailcutv1alpha1.HedgePolicy) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived); c != nil {
		return c.Reason
	}
	return "-"
}

// podLogs returns the logs of a pod.
func podLogs(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, pod string) string {
	t.Helper()
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	return string(b)
}

// reportJSON extracts the JSON report that tailcut verify --json=- prints
// after its table: the last object that starts a line.
func reportJSON(t *testing.T, logs string) *verify.Report {
	t.Helper()
	i := strings.LastIndex(logs, "\n{\n")
	if i < 0 {
		t.Fatalf("the verify Pod printed no JSON report:\n%s", logs)
	}
	var r verify.Report
	if err := json.NewDecoder(strings.NewReader(logs[i+1:])).Decode(&r); err != nil {
		t.Fatalf("the verify Pod's JSON report: %v\n%s", err, logs[i+1:])
	}
	return &r
}

// recordedVerdict is the newest Event tailcut verify recorded on the demo
// policy since the run started: what kubectl describe hp shows.
func recordedVerdict(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ns string, since time.Time) corev1.Event {
	t.Helper()
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=HedgePolicy,involvedObject.name=" + policyName})
	if err != nil {
		t.Fatal(err)
	}
	var newest corev1.Event
	for _, ev := range evs.Items {
		if ev.Source.Component == "tailcut-verify" && !ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) && ev.LastTimestamp.After(newest.LastTimestamp.Time) {
			newest = ev
		}
	}
	if newest.Reason == "" {
		t.Fatalf("no Event from tailcut-verify on hedgepolicy %s/%s since %s", ns, policyName, since.Format(time.RFC3339))
	}
	return newest
}

// prometheus is a client for the cluster's Prometheus (the prometheus-operated
// Service), reached through the API server's service proxy.
func prometheus(t *testing.T, cfg *rest.Config, ns string) promv1.API {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := promapi.NewClient(promapi.Config{
		Address:      strings.TrimSuffix(cfg.Host, "/") + "/api/v1/namespaces/" + ns + "/services/prometheus-operated:web/proxy",
		RoundTripper: rt,
	})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(c)
}

// checkTargets fails unless every ServiceMonitor the chart installed has at
// least one target and all its targets are up.
func checkTargets(ctx context.Context, t *testing.T, c client.Client, prom promv1.API, ns string) {
	t.Helper()
	var sms unstructured.UnstructuredList
	sms.SetGroupVersionKind(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitorList"})
	if err := c.List(ctx, &sms, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing ServiceMonitors: %v", err)
	}
	if len(sms.Items) == 0 {
		t.Fatalf("the chart installed no ServiceMonitor in %s", ns)
	}
	// Prometheus discovers a new target within a few scrape intervals.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		targets, err := prom.Targets(ctx)
		if err != nil {
			t.Fatalf("targets: %v", err)
		}
		var problems []string
		for _, sm := range sms.Items {
			pool := "serviceMonitor/" + ns + "/" + sm.GetName() + "/"
			up, total := 0, 0
			for _, tg := range targets.Active {
				if !strings.HasPrefix(tg.ScrapePool, pool) {
					continue
				}
				total++
				if tg.Health == promv1.HealthGood {
					up++
				} else {
					problems = append(problems, fmt.Sprintf("%s: %s is %s: %s", sm.GetName(), tg.ScrapeURL, tg.Health, tg.LastError))
				}
			}
			if total == 0 {
				problems = append(problems, sm.GetName()+": no target")
			}
			if len(problems) == 0 || time.Now().After(deadline) {
				t.Logf("ServiceMonitor %s: %d of %d targets up", sm.GetName(), up, total)
			}
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ServiceMonitor targets not up after 2 minutes:\n  %s", strings.Join(problems, "\n  "))
		}
		time.Sleep(5 * time.Second)
	}
}

// checkDashboards runs every query of the chart's dashboards against the
// cluster's Prometheus and fails on an error or, while the traffic of the A/B
// run is still in the window, on an empty result. Only NACKs and estimator
// errors may be empty in a healthy run.
func checkDashboards(ctx context.Context, t *testing.T, prom promv1.API, s settings) {
	t.Helper()
	values := map[string]string{
		"__rate_interval": "2m", "__interval": "30s", "__range": "15m", "datasource": "prometheus",
		"policy":      s.namespace + "/" + policyName,
		"cluster":     fmt.Sprintf("tailcut_%s_%s_80", s.namespace, policyName),
		"mesh_routes": "", // a policy on tailcut's proxy: the variable has no value
	}
	dir := filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards")
	ran, failures, err := dashboards.CheckQueries(ctx, prom, dir, values)
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
