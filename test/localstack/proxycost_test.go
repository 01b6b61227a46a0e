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
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/verify"
)

// The verdicts compare each account run with the run without it at the same
// rate and workers, by CPU per request and p50, and judge only valid pairs.
func TestProxyCostVerdicts(t *testing.T) {
	// Envoy's resident set: 64 MiB without the account, 87 MiB with it.
	run := func(via string, workers int, cpu, p50 float64, late int) ProxyCostRun {
		arm := verify.Arm{Sent: 10000}
		arm.P50, arm.Lag.Late = p50, late
		rss := 64.0
		if via == "envoy+account" {
			rss = 87
		}
		return ProxyCostRun{Via: via, Workers: workers, Rate: 500, Arm: arm, CPU: cpu, Elapsed: 20 * time.Second, RSS: rss}
	}
	for _, tc := range []struct {
		name       string
		runs       []ProxyCostRun
		wantMissed bool
		want       string
	}{
		// 1.0 s vs 1.05 s of CPU for 10,000 requests: +5.0%; p50 +0.050 ms;
		// 23 MiB.
		{"within", []ProxyCostRun{run("envoy", 1, 1.0, 0.30, 0), run("envoy+account", 1, 1.05, 0.35, 0)}, false,
			"1 worker(s), 500/s: the account adds +5.0% CPU per request, +0.050 ms at p50 and +23 MiB of memory: meets the goal"},
		// +15.0% CPU.
		{"over on CPU", []ProxyCostRun{run("envoy", 2, 1.0, 0.30, 0), run("envoy+account", 2, 1.15, 0.31, 0)}, true,
			"2 worker(s), 500/s: the account adds +15.0% CPU per request, +0.010 ms at p50 and +23 MiB of memory: misses the goal"},
		// +0.300 ms at p50.
		{"over on p50", []ProxyCostRun{run("envoy", 1, 1.0, 0.30, 0), run("envoy+account", 1, 1.0, 0.60, 0)}, true,
			"misses the goal"},
		// 101 of 10,000 late: the pair is not judged.
		{"invalid", []ProxyCostRun{run("envoy", 1, 1.0, 0.30, 101), run("envoy+account", 1, 2.0, 0.30, 0)}, false,
			"not judged: the generator did not keep the rate"},
	} {
		lines, missed := ProxyCostVerdicts(tc.runs)
		if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || missed != tc.wantMissed {
			t.Errorf("%s: %q, missed %v; want a line with %q, missed %v", tc.name, lines, missed, tc.want, tc.wantMissed)
		}
	}
}
