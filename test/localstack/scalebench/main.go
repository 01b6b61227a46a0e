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

// Command scalebench is make bench-scale: the real operator, API server and
// Envoy with many Services and HedgePolicies (issue #12). It writes its
// section of docs/benchmarks.md, between the scale markers, and leaves the
// rest of the file alone. It exits non-zero when a goal is missed, after
// writing the file.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		policies   = flag.Int("policies", 1000, "Services, EndpointSlices and HedgePolicies")
		namespaces = flag.Int("namespaces", 100, "namespaces they are spread over")
		changes    = flag.Int("changes", 50, "delay changes and endpoint changes measured, each")
		rest       = flag.Duration("rest", time.Minute, "time at rest measured")
		pprof      = flag.String("pprof", "", "address where the operator serves pprof, for diagnosis (e.g. 127.0.0.1:6060)")
		out        = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file whose scale section is written")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", "tailcut-bench-scale-")
	if err != nil {
		return err
	}
	res, err := localstack.RunScale(ctx, localstack.ScaleOptions{Dir: dir, Policies: *policies, Namespaces: *namespaces, Changes: *changes, Rest: *rest, PprofAddress: *pprof, Log: logf})
	if err != nil {
		return fmt.Errorf("%w (kept %s)", err, dir)
	}
	_ = os.RemoveAll(dir)
	res.PrintTable(os.Stdout)
	missed := goals(res)
	section := markdown(res, missed, time.Since(start))
	if err := localstack.WriteSection(*out, "bench-scale", section); err != nil {
		return err
	}
	logf("wrote %s", *out)
	if len(missed) > 0 {
		return fmt.Errorf("goals missed:\n  %s", strings.Join(missed, "\n  "))
	}
	return nil
}

// goals are issue #12's, for 1,000 policies.
func goals(r *localstack.ScaleResult) []string {
	var missed []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			missed = append(missed, fmt.Sprintf(format, args...))
		}
	}
	check(r.Programmed < 10*time.Second, "apply to all Programmed %s, goal < 10s", r.Programmed)
	check(localstack.Percentile(r.DelayPush, 0.99) < time.Second, "delay change push p99 %s, goal < 1s", localstack.Percentile(r.DelayPush, 0.99))
	check(localstack.Percentile(r.EndpointPush, 0.99) < 2*time.Second, "endpoint change with Prometheus hung p99 %s, goal < 2s", localstack.Percentile(r.EndpointPush, 0.99))
	check(r.RestRSSMiB < 250 && r.ResyncPeakRSSMiB < 250, "RSS %.0f MiB at rest, %.0f MiB peak in a resync, goal < 250 MiB", r.RestRSSMiB, r.ResyncPeakRSSMiB)
	check(r.QueriesPerInterval <= 10, "%.1f Prometheus queries per interval, goal at most 10", r.QueriesPerInterval)
	return missed
}

func markdown(r *localstack.ScaleResult, missed []string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Scale (issue #12)\n\nWritten by `make bench-scale` on %s (took %s).\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	fmt.Fprintf(&b, "- machine: %s/%s, %d CPUs; %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), localstack.ToolVersion("envoy", "--version"))
	b.WriteString("- parts: the operator binary (one replica, leader), etcd and kube-apiserver from the tools cache, one real Envoy on the operator's xDS. " +
		"Prometheus is a stub (the test harness's fake) that answers every query with no data and counts them; for the endpoint changes it receives the queries and never answers them. " +
		"Half the policies are Static (20 ms), half Auto with the default window and interval; each Service has one EndpointSlice with two endpoints.\n")
	b.WriteString("- delay change: a Static policy given a new delay; measured from the update to Envoy's `rds.*.update_success` for its route. " +
		"Endpoint change: an endpoint added to a slice; measured to Envoy's cluster membership. Bytes: `tailcut_xds_pushed_bytes_total{type=\"rds\"}`.\n\n")
	b.WriteString("| measure | value |\n|---|---|\n")
	for _, row := range r.Rows() {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	b.WriteString("\nGoals: apply to all Programmed < 10 s; delay push p99 < 1 s; endpoint push p99 < 2 s with Prometheus hung; RSS < 250 MiB; at most 10 queries per interval.\n\n")
	if len(missed) == 0 {
		b.WriteString("Verdict: every goal met.\n")
	} else {
		b.WriteString("Verdict: MISSED:\n\n")
		for _, m := range missed {
			fmt.Fprintf(&b, "- %s\n", m)
		}
	}
	return b.String()
}
