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

// Command fanoutbench is `make bench-fanout`: delay.mode FanOut against one
// hedge at the auto delay, on the bimodal3 scenario (#26). It runs
// localstack.RunFanOut, writes its section of docs/benchmarks.md, and exits
// non-zero when a run or the comparison misses, after writing.
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
		fmt.Fprintln(os.Stderr, "bench-fanout:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Now()
	o := localstack.FanOutOptions{Logf: func(f string, a ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}}
	scenario := flag.String("scenario", "bimodal3", "the workload's latency scenario")
	flag.IntVar(&o.Rate, "rate", 100, "GETs per second per arm")
	flag.IntVar(&o.PostRate, "post-rate", 10, "POSTs per second beside the GETs")
	flag.DurationVar(&o.Duration, "duration", time.Minute, "measured run of each configuration")
	out := flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file whose bench-fanout section is rewritten")
	flag.Parse()
	sc, err := localstack.LookupScenario(*scenario)
	if err != nil {
		return err
	}
	o.Scenario = sc
	dir, err := os.MkdirTemp("", "tailcut-bench-fanout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	o.Dir = dir
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runs, err := localstack.RunFanOut(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range runs {
		r.Report.PrintTable(os.Stdout)
	}
	lines, missed := localstack.FanOutVerdicts(runs)
	for _, l := range lines {
		fmt.Println(l)
	}
	if err := localstack.WriteSection(*out, "bench-fanout", localstack.FanOutSection(runs, o, time.Since(start))); err != nil {
		return err
	}
	fmt.Printf("wrote the bench-fanout section of %s\n", *out)
	if missed {
		return fmt.Errorf("a run or the comparison missed (above)")
	}
	return nil
}
