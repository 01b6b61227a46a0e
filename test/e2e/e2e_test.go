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
// creates a kind cluster, installs kube-prometheus-stack and the chart with its
// demo, and runs these tests (go test -tags e2e ./test/e2e). They wait for the
// demo HedgePolicy to be Ready with a delay derived from Prometheus, run the k6
// A/B Job (helm test), print the same A/B table as `make demo`, fail when the
// tail did not get shorter, and run every dashboard query against Prometheus.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
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

	t.Run("k6 A/B: the hedged tail is shorter", func(t *testing.T) {
		// The warm-up Job's traffic would count at the backends: stop it. The
		// delay stays (the policy's staleAfter covers the gap).
		warmup := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.release + "-warmup"}}
		if err := c.Delete(ctx, warmup, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			t.Fatalf("deleting the warm-up Job: %v", err)
		}
		out, helmErr := exec.CommandContext(ctx, s.helm, "test", s.release, "-n", s.namespace, "--timeout", "15m").CombinedOutput()
		t.Logf("helm test:\n%s", out)
		logs := jobLogs(ctx, t, cs, s.namespace, s.release+"-ab")
		if err := os.WriteFile(filepath.Join(s.artifacts, "k6.log"), []byte(logs), 0o644); err != nil {
			t.Fatal(err)
		}
		summary := summaryJSON(t, logs)
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
			t.Fatal(err)
		}
		report, err := localstack.NewReport(summary, policy)
		if err != nil {
			t.Fatal(err)
		}
		report.PrintTable(os.Stdout)
		if err := report.Write(s.artifacts); err != nil {
			t.Errorf("writing the report: %v", err)
		}
		if !report.Pass {
			t.Errorf("verdict FAIL: %v", report.Reasons)
		}
		if report.DroppedIterations > 0 {
			t.Errorf("%v dropped iterations: the run is invalid", report.DroppedIterations)
		}
		for _, arm := range []string{"bypass", "hedged"} {
			if a := report.Arms[arm]; a.Count == 0 || a.ErrorRate > 0 {
				t.Errorf("%s arm: %v requests, error rate %v", arm, a.Count, a.ErrorRate)
			}
		}
		if b, h := report.Arms["bypass"].P99, report.Arms["hedged"].P99; !(h <= 0.5*b) {
			t.Errorf("hedged p99 %.1f ms is not <= 0.5 x bypass p99 %.1f ms", h, b)
		}
		if helmErr != nil {
			t.Errorf("helm test: %v", helmErr)
		}
	})

	t.Run("every dashboard query returns data", func(t *testing.T) {
		checkDashboards(ctx, t, cs, s)
	})
}

// waitForPolicy waits until the demo policy is Ready with a delay derived from
// Prometheus (the warm-up Job sends the traffic it is derived from).
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
			line = fmt.Sprintf("Ready=%v source=%s delay=%v: %s", ready, p.Status.DelaySource, p.Status.EffectiveDelay, p.Status.DelayReason)
			if ready && p.Status.DelaySource == tailcutv1alpha1.DelaySourcePrometheus {
				t.Logf("policy %s/%s: %s", ns, policyName, line)
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

// jobLogs returns the logs of the (single) pod of a Job.
func jobLogs(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, job string) string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no pod of Job %s: %v", job, err)
	}
	b, err := cs.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pods.Items[0].Name, err)
	}
	return string(b)
}

// summaryJSON extracts the TAILCUT_SUMMARY_JSON line test/k6/hedge-ab.js prints.
func summaryJSON(t *testing.T, logs string) map[string]any {
	t.Helper()
	var line string
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "TAILCUT_SUMMARY_JSON "); ok {
			line = rest
		}
	}
	if line == "" {
		t.Fatalf("the k6 Job printed no TAILCUT_SUMMARY_JSON line:\n%s", logs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("TAILCUT_SUMMARY_JSON: %v", err)
	}
	return m
}

var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// Queries that have no series until something goes wrong: no NACK and no
// estimator error is the healthy state.
var mayBeEmpty = []string{"tailcut_xds_nacks_total", "tailcut_estimate_errors_total"}

// checkDashboards runs every panel query of the chart's dashboards against the
// cluster's Prometheus (through the API server's service proxy) and fails on
// an error or, while the traffic of the A/B run is still in the window, on an
// empty result.
func checkDashboards(ctx context.Context, t *testing.T, cs kubernetes.Interface, s settings) {
	samples := map[string]string{
		"__rate_interval": "2m", "__interval": "30s", "__range": "15m",
		"policy":    s.namespace + "/" + policyName,
		"cluster":   fmt.Sprintf("tailcut_%s_%s_80", s.namespace, policyName),
		"quantile":  "0.95",
		"budget":    "0.05",
		"namespace": s.namespace,
	}
	files, _ := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards", "*.json"))
	for _, f := range files {
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr  string `json:"expr"`
					RefID string `json:"refId"`
				} `json:"targets"`
			} `json:"panels"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				q := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(m string) string {
					sub := grafanaVar.FindStringSubmatch(m)
					if v, ok := samples[sub[1]+sub[2]]; ok {
						return v
					}
					t.Errorf("%s: panel %q: no sample for %s", filepath.Base(f), p.Title, m)
					return m
				})
				n, err := instantQuery(ctx, cs, s.monitoring, q)
				where := fmt.Sprintf("%s: panel %q query %s", filepath.Base(f), p.Title, tg.RefID)
				switch {
				case err != nil:
					t.Errorf("%s: %v\n  %s", where, err, q)
				case n == 0 && !containsAny(q, mayBeEmpty):
					t.Errorf("%s returned no data while traffic flowed:\n  %s", where, q)
				}
			}
		}
	}
}

// instantQuery runs a PromQL query on prometheus-operated and returns the number
// of series in the result.
func instantQuery(ctx context.Context, cs kubernetes.Interface, ns, q string) (int, error) {
	b, err := cs.CoreV1().Services(ns).ProxyGet("http", "prometheus-operated", "9090", "api/v1/query",
		map[string]string{"query": q}).DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("query: %w: %s", err, b)
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return 0, err
	}
	if resp.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", resp.Error)
	}
	return len(resp.Data.Result), nil
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
