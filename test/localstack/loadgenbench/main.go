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

// Command loadgenbench is `make bench-loadgen`: tailcut verify's generator
// against a no-op HTTP server at several rates. It records the achieved rate,
// how late sends left (p99, max, the count 10ms or more late) and the
// generator's CPU, in its section of docs/benchmarks.md. The server runs in a
// child process, so the CPU counted is the generator's alone.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-serve" {
		serve()
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-loadgen:", err)
		os.Exit(1)
	}
}

// serve answers every request with 200 and no body on a loopback port it
// prints, until its standard input closes (the parent is gone) or ten minutes
// pass.
func serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	go func() {
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}()
	_ = http.Serve(ln, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

type result struct {
	rate int
	arm  verify.Arm
	cpu  time.Duration
	took time.Duration
}

func run() error {
	var (
		rates    = flag.String("rates", "150,1000,5000", "comma-separated requests per second")
		duration = flag.Duration("duration", 30*time.Second, "length of each run")
		out      = flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file whose bench-loadgen section is rewritten")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	server := exec.CommandContext(ctx, self, "-serve")
	stdin, err := server.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := server.StdoutPipe()
	if err != nil {
		return err
	}
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		return err
	}
	defer func() { _ = stdin.Close(); _ = server.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the no-op server printed no port: %w", err)
	}
	url := "http://127.0.0.1:" + strings.TrimSpace(line) + "/"

	criteria := verify.DefaultCriteria()
	var results []result
	for _, r := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || rate <= 0 {
			return fmt.Errorf("-rates: %q is not a rate", r)
		}
		before := cpuTime()
		start := time.Now()
		arm := verify.Stream(ctx, url, nil, rate, *duration, verify.DefaultLimits(), criteria.LateAfter)
		res := result{rate: rate, arm: arm, cpu: cpuTime() - before, took: time.Since(start)}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Printf("%5d/s: sent %d of %d, achieved %.1f/s, lag p99 %.2fms max %.2fms, %d late, errors %d, generator CPU %.1f%% of a core\n",
			rate, arm.Sent, arm.Scheduled, arm.AchievedRate, arm.Lag.P99MS, arm.Lag.MaxMS, arm.Lag.Late, arm.Errors, 100*res.cpu.Seconds()/res.took.Seconds())
		results = append(results, res)
	}
	return localstack.WriteSection(*out, "bench-loadgen", markdown(results, *duration))
}

// cpuTime is this process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func markdown(results []result, duration time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## The load generator (`make bench-loadgen`)\n\n")
	fmt.Fprintf(&b, "Written by `make bench-loadgen` on %s: tailcut verify's generator (%s, constant pacer, no cap on connections or workers) "+
		"alone against a no-op HTTP server in another process on loopback, %s per rate; %s/%s, %d CPUs. A send is late when it leaves "+
		"10ms or more after its place in the schedule; a run with more than 1%% late sends is invalid. CPU is the generator process's "+
		"user + system time.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), verify.Generator(), duration, runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "| rate/s | sent | scheduled | achieved/s | send lag p99 ms | send lag max ms | late | errors | latency p50 ms | latency p99 ms | generator CPU %% of a core | CPU ms per 1,000 requests |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		a := r.arm
		perK := 0.0
		if a.Sent > 0 {
			perK = float64(r.cpu.Milliseconds()) / float64(a.Sent) * 1000
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %.1f | %.2f | %.2f | %d | %d | %.2f | %.2f | %.1f | %.1f |\n", r.rate, a.Sent, a.Scheduled, a.AchievedRate,
			a.Lag.P99MS, a.Lag.MaxMS, a.Lag.Late, a.Errors, a.P50, a.P99, 100*r.cpu.Seconds()/r.took.Seconds(), perK)
	}
	return b.String()
}
