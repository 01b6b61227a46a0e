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

// Command demo runs tailcut's main job on the local stack (see package localstack)
// and prints the tail with and without hedging. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/dashboards"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ports := localstack.DefaultPorts()
	var (
		duration       = flag.Duration("duration", time.Minute, "length of the A/B's measured run")
		scenario       = flag.String("scenario", "bimodal4", "workload model, one of "+strings.Join(localstack.ScenarioNames(), ", "))
		rate           = flag.Int("rate", 150, "requests per second per arm")
		out            = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "_output", "demo"), "directory for logs and the report")
		ratio          = flag.Float64("max-p99-ratio", 0, "pass when hedged p99 <= this x bypass p99 (default 0.5, or 1.1 where hedging cannot win)")
		drawDashboards = flag.Bool("dashboards", true, "draw the chart's Grafana dashboards from the stack's Prometheus into -out")
	)
	flag.IntVar(&ports.Listener, "listener-port", ports.Listener, "Envoy listener port")
	flag.IntVar(&ports.Admin, "admin-port", ports.Admin, "Envoy admin port")
	flag.IntVar(&ports.XDS, "xds-port", ports.XDS, "operator xDS port")
	flag.IntVar(&ports.Prometheus, "prometheus-port", ports.Prometheus, "Prometheus port")
	flag.IntVar(&ports.Metrics, "metrics-port", ports.Metrics, "operator metrics port")
	flag.IntVar(&ports.Probe, "probe-port", ports.Probe, "operator health probe port")
	flag.IntVar(&ports.Workloads[0], "workload-port", ports.Workloads[0], "first workload port (the next two follow)")
	flag.Parse()
	ports.Workloads[1], ports.Workloads[2] = ports.Workloads[0]+1, ports.Workloads[0]+2
	sc, err := localstack.LookupScenario(*scenario)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	stack, err := localstack.Start(ctx, localstack.Options{Dir: *out, Ports: ports, Scenario: sc, Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping every process the demo started")
		stack.Stop()
	}()

	if *ratio == 0 {
		*ratio = 0.5
		if !sc.HedgingHelps {
			// Hedging cannot win here; it must not hurt.
			*ratio = 1.1
		}
	}
	trafficStart := time.Now()
	policy, err := stack.ApplyPolicy(ctx, nil)
	if err != nil {
		return fmt.Errorf("applying the HedgePolicy: %w", err)
	}
	budget := policy.Spec.EffectiveBudget().MaxExtraLoadPercent
	logf("applied HedgePolicy %s/%s (Auto, p95, budget %d%%); sending ordinary traffic until a delay is derived from it", localstack.Namespace, localstack.PolicyName, budget)
	if _, err := stack.WaitReady(ctx, *rate, 3*time.Minute); err != nil {
		return err
	}
	logf("running tailcut verify for %s at %d requests/s per arm (and 10 POSTs/s)", *duration, *rate)
	report, _, err := stack.RunAB(ctx, localstack.ABOptions{Rate: *rate, Duration: *duration, MaxP99Ratio: *ratio, PostRate: 10})
	if err != nil {
		return err
	}
	report.PrintTable(os.Stdout)
	if err := report.Write(*out); err != nil {
		return err
	}
	logf("wrote %s and %s", filepath.Join(*out, "report.json"), filepath.Join(*out, "report.html"))
	if *drawDashboards {
		if err := renderDashboards(ctx, ports.Prometheus, trafficStart, *out, logf); err != nil {
			return err
		}
	}
	if !report.Pass {
		return fmt.Errorf("verdict FAIL: %v", report.Reasons)
	}
	return nil
}

// renderDashboards draws the chart's dashboards from warm-up to the end of the
// A/B run, since no Grafana runs here. The variables are the ones the local
// stack's e2e test checks the queries with, except the rate window: Grafana's
// $__rate_interval would be 8s (four 2s scrapes); 10s spans two 5s steps, which
// smooths a short run's noise without hiding the warm-up's steps.
func renderDashboards(ctx context.Context, prometheusPort int, from time.Time, out string, logf func(string, ...any)) error {
	client, err := promapi.NewClient(promapi.Config{Address: fmt.Sprintf("http://127.0.0.1:%d", prometheusPort)})
	if err != nil {
		return err
	}
	// Prometheus has the run's last seconds after one more scrape.
	time.Sleep(3 * time.Second)
	window := dashboards.Window{Start: from, End: time.Now(), Step: 5 * time.Second}
	values := map[string]string{
		"__rate_interval": "10s", "__interval": "5s", "__range": fmt.Sprintf("%ds", int(window.End.Sub(from).Seconds())), "datasource": "prometheus",
		"policy": localstack.Namespace + "/" + localstack.PolicyName, "cluster": plan.ClusterName(localstack.Namespace, localstack.Service, localstack.Port),
		"mesh_routes": "", // a policy on tailcut's proxy: the variable has no value
	}
	rendered, err := dashboards.RenderAll(ctx, promv1.NewAPI(client), filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards"), values, window, out)
	for _, r := range rendered {
		logf("wrote %s", r.Path)
		if len(r.NoData) > 0 {
			logf("  panels with no data: %s", strings.Join(r.NoData, ", "))
		}
	}
	return err
}
