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

// Command bench runs the standard scenarios on the local stack, each with
// tailcut's automatic delay and with a sweep of static delays, and writes the
// results as a Markdown table (make bench-tail writes docs/benchmarks.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type row struct {
	scenario, delay string
	r               localstack.Report
}

func run() error {
	var (
		scenarios = flag.String("scenarios", "bimodal,bimodal3,lognormal,stall,badhost,saturation", "comma-separated scenarios")
		duration  = flag.String("duration", "60s", "k6 run length of the automatic-delay run")
		sweepDur  = flag.String("sweep-duration", "30s", "k6 run length of each static delay of the sweep")
		sweep     = flag.String("sweep", "10ms,15ms,20ms,30ms,50ms", "static delays to compare against")
		rate      = flag.Int("rate", 150, "requests per second per arm")
		out       = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file to write")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	var rows []row
	for _, name := range strings.Split(*scenarios, ",") {
		sc, err := localstack.LookupScenario(name)
		if err != nil {
			return err
		}
		rs, err := benchScenario(ctx, sc, *duration, *sweepDur, strings.Split(*sweep, ","), *rate, logf)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, rs...)
	}
	return os.WriteFile(*out, []byte(markdown(rows, *rate, *duration, *sweepDur, time.Since(start))), 0o644)
}

func benchScenario(ctx context.Context, sc localstack.Scenario, duration, sweepDur string, sweep []string, rate int,
	logf func(string, ...any)) ([]row, error) {
	dir, err := os.MkdirTemp("", "tailcut-bench-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	stack, err := localstack.Start(ctx, localstack.Options{Dir: dir, Ports: localstack.DefaultPorts(), Scenario: sc, Log: logf})
	if err != nil {
		return nil, err
	}
	defer stack.Stop()
	if _, err := stack.ApplyPolicy(ctx, nil); err != nil {
		return nil, err
	}
	if _, err := stack.WaitReady(ctx, rate, 3*time.Minute); err != nil && sc.HedgingHelps {
		return nil, err
	}
	var rows []row
	measure := func(label, d string) error {
		logf("%s: k6 %s with delay %s", sc.Name, d, label)
		r, _, err := stack.RunAB(ctx, localstack.K6Options{Rate: rate, Duration: d, MaxP99Ratio: 0.5}, nil)
		if err != nil {
			return err
		}
		if label == "auto" {
			label = fmt.Sprintf("auto (%.1fms, %s)", r.DelayMS, r.DelaySource)
		}
		rows = append(rows, row{scenario: sc.Name, delay: label, r: r})
		return nil
	}
	if err := measure("auto", duration); err != nil {
		return nil, err
	}
	for _, d := range sweep {
		static, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("-sweep %q: %w", d, err)
		}
		if err := setStatic(ctx, stack.Client, static); err != nil {
			return nil, err
		}
		// Let the new delay reach Envoy before measuring.
		time.Sleep(3 * time.Second)
		if err := measure(d, sweepDur); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func setStatic(ctx context.Context, c client.Client, d time.Duration) error {
	var p tailcutv1alpha1.HedgePolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: localstack.Namespace, Name: localstack.PolicyName}, &p); err != nil {
		return err
	}
	base := p.DeepCopy()
	p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: &metav1.Duration{Duration: d}}
	return c.Patch(ctx, &p, client.MergeFrom(base))
}

func markdown(rows []row, rate int, duration, sweepDur string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Tail latency benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `make bench-tail` on %s (took %s).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "- machine: %s/%s, %d CPUs; %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), version("envoy", "--version"))
	fmt.Fprintf(&b, "- load: k6 constant-arrival-rate, %d rps per arm, bypass and hedged arms in one run through one Envoy to the same 3 replicas; "+
		"automatic delay runs last %s, static sweep runs %s\n", rate, duration, sweepDur)
	fmt.Fprintf(&b, "- latency in ms at the client (k6); extra load counted at the replicas (x-envoy-attempt-count > 1); budget 5%%\n\n")
	fmt.Fprintf(&b, "| scenario | delay | bypass p50 | hedged p50 | bypass p99 | hedged p99 | p99 ratio | bypass p99.9 | hedged p99.9 | extra load %% | errors | dropped |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	best := map[string]row{}
	for _, r := range rows {
		a, h := r.r.Arms["bypass"], r.r.Arms["hedged"]
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.4f | %.0f |\n", r.scenario, r.delay,
			a.P50, h.P50, a.P99, h.P99, r.r.Ratio["p99"], a.P999, h.P999, r.r.ExtraLoadPct, h.ErrorRate, r.r.DroppedIterations)
		if !strings.HasPrefix(r.delay, "auto") && r.r.ExtraLoadPct <= float64(r.r.BudgetPct) {
			if cur, ok := best[r.scenario]; !ok || r.r.Ratio["p99"] < cur.r.Ratio["p99"] {
				best[r.scenario] = r
			}
		}
	}
	fmt.Fprintf(&b, "\nBest static delay within the budget, by hedged/bypass p99:\n\n")
	for _, r := range rows {
		if bst, ok := best[r.scenario]; ok && strings.HasPrefix(r.delay, "auto") {
			fmt.Fprintf(&b, "- %s: static %s gives p99 ratio %.2f at %.2f%% extra load; tailcut's %s gives %.2f at %.2f%%\n",
				r.scenario, bst.delay, bst.r.Ratio["p99"], bst.r.ExtraLoadPct, r.delay, r.r.Ratio["p99"], r.r.ExtraLoadPct)
		}
	}
	return b.String()
}

func version(bin string, args ...string) string {
	path := os.Getenv(strings.ToUpper(bin) + "_BIN")
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		return bin + " version unknown"
	}
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return bin + " version unknown"
}
