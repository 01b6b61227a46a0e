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
	"syscall"
	"time"

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
		duration = flag.String("duration", "60s", "length of the measured k6 run")
		scenario = flag.String("scenario", "bimodal", "workload model: bimodal, bimodal3, lognormal, stall, badhost or saturation")
		rate     = flag.Int("rate", 150, "requests per second per arm")
		out      = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "_output", "demo"), "directory for logs and the report")
		ratio    = flag.Float64("max-p99-ratio", 0.5, "pass when hedged p99 <= this x bypass p99")
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
	if _, err := time.ParseDuration(*duration); err != nil {
		return fmt.Errorf("-duration %q: %w", *duration, err)
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

	if _, err := stack.ApplyPolicy(ctx, nil); err != nil {
		return fmt.Errorf("applying the HedgePolicy: %w", err)
	}
	logf("applied HedgePolicy %s/%s (Auto, p95, budget 5%%); sending warm-up traffic until a delay is derived", localstack.Namespace, localstack.PolicyName)
	if _, err := stack.WaitReady(ctx, *rate, 3*time.Minute); err != nil {
		return err
	}
	logf("running k6 for %s at %d rps per arm", *duration, *rate)
	report, _, err := stack.RunAB(ctx, localstack.K6Options{Rate: *rate, Duration: *duration, MaxP99Ratio: *ratio}, os.Stdout)
	if err != nil {
		return err
	}
	report.PrintTable(os.Stdout)
	if err := report.Write(*out); err != nil {
		return err
	}
	logf("wrote %s and %s", filepath.Join(*out, "report.json"), filepath.Join(*out, "report.html"))
	if !report.Pass && sc.HedgingHelps {
		return fmt.Errorf("the hedged tail was not shorter: %v", report.Reasons)
	}
	return nil
}
