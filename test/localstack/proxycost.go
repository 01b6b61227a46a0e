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
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/harness"
)

// ProxyCostOptions say what `make bench-proxy` runs.
type ProxyCostOptions struct {
	Dir      string        // work directory: bootstraps, logs, the module
	Rates    []int         // requests per second
	Workers  []int         // Envoy worker threads (--concurrency)
	Duration time.Duration // measured length of each run, after a warm-up of a fifth of it
	Logf     func(format string, args ...any)
}

// ProxyCostRun is one measured run: requests at Rate through Via.
type ProxyCostRun struct {
	// Via is "direct" (the generator to the upstream, no proxy), "envoy"
	// (tailcut's route and cluster, no hedge account) or "envoy+account".
	Via     string
	Workers int // 0 for direct
	Rate    int
	Arm     verify.Arm
	// CPU is the proxy's user + system seconds over the measured run.
	CPU     float64
	Elapsed time.Duration
	// RSS is the proxy's resident set at the run's end, in MiB: the
	// module's VMs (one per worker and the main thread) show here.
	RSS float64
}

// CPUPerThousand is the proxy's CPU milliseconds per 1,000 requests.
func (r ProxyCostRun) CPUPerThousand() float64 {
	if r.Arm.Sent == 0 {
		return 0
	}
	return 1e6 * r.CPU / float64(r.Arm.Sent)
}

// Valid says whether the generator kept the rate: at most 1% of sends late
// and no errors.
func (r ProxyCostRun) Valid() bool {
	return r.Arm.Sent > 0 && r.Arm.Errors == 0 && float64(r.Arm.Lag.Late) <= 0.01*float64(r.Arm.Sent)
}

// benchHost is the Host the bench's requests carry: the policy's Service.
const benchHost = "web.bench"

// RunProxyCost measures what tailcut's data path costs: the same GETs at
// each rate sent straight to a no-op upstream, then through Envoy with the
// route and cluster tailcut renders for a policy, without and with the hedge
// account, on each number of workers. The upstream is a second Envoy that
// answers every request itself (direct_response), so neither side waits on an
// application. The hedge's delay (50 ms) is never reached, as in the common
// case: every request pays the account's bookkeeping and none is hedged.
func RunProxyCost(ctx context.Context, o ProxyCostOptions) ([]ProxyCostRun, error) {
	envoy, err := envoyBin()
	if err != nil {
		return nil, err
	}
	module, err := harness.BuildHedgeAccountModule(o.Dir)
	if err != nil {
		return nil, err
	}
	logs := filepath.Join(o.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	upPort, err := harness.ReservePort()
	if err != nil {
		return nil, err
	}
	upstream, err := startBenchEnvoy(ctx, envoy, o.Dir, "noop-upstream", noopUpstream(upPort), 1, upPort, benchHost)
	if err != nil {
		return nil, err
	}
	defer upstream.Stop(5 * time.Second)

	var runs []ProxyCostRun
	measure := func(via string, workers int, p *harness.Process, url string) error {
		for _, rate := range o.Rates {
			header := http.Header{"Host": []string{benchHost}}
			verify.Stream(ctx, url, header, rate, o.Duration/5, verify.DefaultLimits(), verify.DefaultCriteria().LateAfter)
			var before float64
			if p != nil {
				if before, err = cpuSeconds(p.PID()); err != nil {
					return err
				}
			}
			start := time.Now()
			arm := verify.Stream(ctx, url, header, rate, o.Duration, verify.DefaultLimits(), verify.DefaultCriteria().LateAfter)
			r := ProxyCostRun{Via: via, Workers: workers, Rate: rate, Arm: arm, Elapsed: time.Since(start)}
			if p != nil {
				after, err := cpuSeconds(p.PID())
				if err != nil {
					return err
				}
				r.CPU = after - before
				if r.RSS, _, err = memory(p.PID()); err != nil {
					return err
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			o.Logf("%-13s workers %d %5d/s: achieved %.1f/s, %d late, %d errors, p50 %.3f ms p99 %.3f ms, proxy CPU %.1f%% of a core, %.1f ms per 1,000, RSS %.1f MiB",
				via, workers, rate, arm.AchievedRate, arm.Lag.Late, arm.Errors, arm.P50, arm.P99, 100*r.CPU/r.Elapsed.Seconds(), r.CPUPerThousand(), r.RSS)
			runs = append(runs, r)
		}
		return nil
	}
	if err := measure("direct", 0, nil, fmt.Sprintf("http://127.0.0.1:%d/", upPort)); err != nil {
		return runs, err
	}
	for _, workers := range o.Workers {
		for _, withAccount := range []bool{false, true} {
			via := "envoy"
			if withAccount {
				via = "envoy+account"
			}
			port, err := harness.ReservePort()
			if err != nil {
				return runs, err
			}
			boot, err := proxyUnderTest(port, upPort, module, withAccount)
			if err != nil {
				return runs, err
			}
			p, err := startBenchEnvoy(ctx, envoy, o.Dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(via, "+", "-"), workers), boot, workers, port, benchHost)
			if err != nil {
				return runs, err
			}
			err = measure(via, workers, p, fmt.Sprintf("http://127.0.0.1:%d/", port))
			p.Stop(5 * time.Second)
			if err != nil {
				return runs, err
			}
		}
	}
	return runs, nil
}

// proxyUnderTest is the static bootstrap of tailcut's listener, route and
// cluster for one policy on web.bench:80, whose one endpoint is the upstream,
// with or without the hedge account.
func proxyUnderTest(listenPort, upPort int, module string, withAccount bool) ([]byte, error) {
	p := plan.RoutePlan{
		Name: "bench/web", Namespace: "bench", Service: "web", Port: 80,
		Hosts:     plan.ServiceHosts("web", "bench", 80),
		Match:     plan.Match{PathPrefix: "/", Methods: []string{"GET", "HEAD"}},
		Hedge:     &plan.Hedge{Delay: 50 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"}},
		Budget:    plan.Budget{Percent: 5, MinConcurrency: 3},
		Endpoints: []plan.Endpoint{{Address: "127.0.0.1", Port: int32(upPort)}},
	}
	res, err := envoyconf.Translate([]plan.RoutePlan{p}, envoyconf.TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: uint32(listenPort), HedgeAccountModule: module})
	if err != nil {
		return nil, err
	}
	b, err := envoyconf.StaticBootstrap(res, envoyconf.StaticOptions{WithoutAccount: !withAccount})
	if err != nil {
		return nil, err
	}
	return envoyconf.MessageYAML(b)
}

// noopUpstream is an Envoy that answers every request on port with 200 and an
// empty body.
func noopUpstream(port int) []byte {
	return []byte(fmt.Sprintf(`static_resources:
  listeners:
  - name: noop
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: noop
          route_config:
            virtual_hosts:
            - {name: noop, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200}}]}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`, port))
}

// envoyBin is $ENVOY_BIN, the Envoy the benchmarks run beside a stack.
func envoyBin() (string, error) {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return bin, nil
	}
	return "", errors.New("ENVOY_BIN is not set: run through make (hack/tools.sh envoy installs it)")
}

// startBenchEnvoy runs Envoy on bootstrap with workers threads and waits
// until port answers a GET for host with 200.
func startBenchEnvoy(ctx context.Context, bin, dir, name string, bootstrap []byte, workers, port int, host string) (*harness.Process, error) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, bootstrap, 0o644); err != nil {
		return nil, err
	}
	p, err := harness.StartProcess(name, filepath.Join(dir, "logs"), nil, bin, "-c", path, "--concurrency", strconv.Itoa(workers),
		"--base-id", strconv.Itoa(port), "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr(port)+"/", nil)
		req.Host = host
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if done, err := p.Exited(); done {
			return nil, fmt.Errorf("%s exited (%v); log %s:\n%s", name, err, p.Log, p.Tail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop(5 * time.Second)
			return nil, fmt.Errorf("%s did not answer 200 on %s within a minute; log %s:\n%s", name, addr(port), p.Log, p.Tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ProxyCostGoal is what the hedge account may add (#26): 10% of the proxy's
// CPU and 0.2 ms at p50.
const (
	ProxyCostGoalCPU   = 0.10
	ProxyCostGoalP50MS = 0.2
)

// ProxyCostVerdicts compares each rate and worker count with and without the
// account against ProxyCostGoal, one line each; missed says whether a pair of
// valid runs missed it.
func ProxyCostVerdicts(runs []ProxyCostRun) (lines []string, missed bool) {
	find := func(via string, workers, rate int) *ProxyCostRun {
		for i := range runs {
			if r := &runs[i]; r.Via == via && r.Workers == workers && r.Rate == rate {
				return r
			}
		}
		return nil
	}
	for _, r := range runs {
		if r.Via != "envoy+account" {
			continue
		}
		base := find("envoy", r.Workers, r.Rate)
		if base == nil {
			continue
		}
		cpu := r.CPUPerThousand()/base.CPUPerThousand() - 1
		p50 := r.Arm.P50 - base.Arm.P50
		verdict := "meets the goal"
		switch {
		case !r.Valid() || !base.Valid():
			verdict = "not judged: the generator did not keep the rate"
		case cpu > ProxyCostGoalCPU || p50 > ProxyCostGoalP50MS:
			verdict, missed = "misses the goal", true
		}
		lines = append(lines, fmt.Sprintf("%d worker(s), %d/s: the account adds %+.1f%% CPU per request, %+.3f ms at p50 and %+.0f MiB of memory: %s",
			r.Workers, r.Rate, 100*cpu, p50, r.RSS-base.RSS, verdict))
	}
	return lines, missed
}

// ProxyCostSection is the Markdown section `make bench-proxy` writes.
func ProxyCostSection(runs []ProxyCostRun, o ProxyCostOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## The data path's cost (`make bench-proxy`)\n\n")
	fmt.Fprintf(&b, "Written by `make bench-proxy` on %s (%s/%s, %d CPUs): GETs from tailcut verify's generator (%s) at each rate, "+
		"%s each after a %s warm-up, to a no-op upstream (an Envoy answering every request itself) either directly or through "+
		"Envoy with the listener, route and cluster tailcut renders for one policy (hedge after 50 ms, never reached: every request "+
		"pays the account's bookkeeping, none is hedged), without and with the hedge account (the Proxy-Wasm module). CPU is the "+
		"proxy Envoy's user + system time over the run, RSS its resident set at the run's end; latency is the client's, so the proxy's added latency is a row's p50 and "+
		"p99 less the direct row's at the same rate. A run is invalid when more than 1%% of sends left 10 ms or more late, or a "+
		"request failed. Goal (#26): the account adds at most %.0f%% CPU and %.1f ms at p50.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), verify.Generator(),
		o.Duration, o.Duration/5, 100*ProxyCostGoalCPU, ProxyCostGoalP50MS)
	fmt.Fprintf(&b, "| via | workers | rate/s | achieved/s | late | errors | p50 ms | p99 ms | proxy CPU %% of a core | CPU ms per 1,000 requests | proxy RSS MiB | valid |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		workers, cpu, perK, rss := "-", "-", "-", "-"
		if r.Via != "direct" {
			workers = strconv.Itoa(r.Workers)
			cpu = fmt.Sprintf("%.1f", 100*r.CPU/r.Elapsed.Seconds())
			perK = fmt.Sprintf("%.1f", r.CPUPerThousand())
			rss = fmt.Sprintf("%.0f", r.RSS)
		}
		valid := "yes"
		if !r.Valid() {
			valid = "no"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %d | %d | %.3f | %.3f | %s | %s | %s | %s |\n", r.Via, workers, r.Rate, r.Arm.AchievedRate,
			r.Arm.Lag.Late, r.Arm.Errors, r.Arm.P50, r.Arm.P99, cpu, perK, rss, valid)
	}
	lines, _ := ProxyCostVerdicts(runs)
	fmt.Fprintf(&b, "\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	return b.String()
}
