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

// Command proxybench is `make bench-proxy`: what tailcut's data path costs,
// Envoy's CPU and added latency with and without the hedge account
// (localstack.RunProxyCost). It writes its section of docs/benchmarks.md and
// exits non-zero when a valid pair of runs misses the goal, after writing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-proxy:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		rates    = flag.String("rates", "500,2000,5000", "comma-separated requests per second")
		workers  = flag.String("workers", "1,2", "comma-separated Envoy worker counts")
		duration = flag.Duration("duration", 20*time.Second, "measured length of each run")
		out      = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file whose bench-proxy section is rewritten")
	)
	flag.Parse()
	o := localstack.ProxyCostOptions{Duration: *duration, Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }}
	var err error
	if o.Rates, err = ints("-rates", *rates); err != nil {
		return err
	}
	if o.Workers, err = ints("-workers", *workers); err != nil {
		return err
	}
	if o.Dir, err = os.MkdirTemp("", "tailcut-bench-proxy-"); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(o.Dir) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runs, err := localstack.RunProxyCost(ctx, o)
	if err != nil {
		return err
	}
	lines, missed := localstack.ProxyCostVerdicts(runs)
	for _, l := range lines {
		fmt.Println(l)
	}
	if err := localstack.WriteSection(*out, "bench-proxy", localstack.ProxyCostSection(runs, o)); err != nil {
		return err
	}
	fmt.Println("wrote", *out)
	if missed {
		return fmt.Errorf("the hedge account missed the goal (at most %.0f%% CPU, %.1f ms at p50) in a valid run", 100*localstack.ProxyCostGoalCPU, localstack.ProxyCostGoalP50MS)
	}
	return nil
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}
