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
	"os"
	"testing"
	"time"
)

// TestScale100 is the smaller run of make bench-scale that make test
// includes: 100 policies in 10 namespaces against the real API server, the
// real operator and a real Envoy, with generous bounds (the benchmark's goals
// are for 1,000 and are recorded in docs/benchmarks.md, not asserted here).
func TestScale100(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "tailcut-scale-")
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunScale(ctx, ScaleOptions{Dir: dir, Policies: 100, Namespaces: 10, Changes: 20, Rest: 30 * time.Second, Log: t.Logf})
	if err != nil {
		t.Fatalf("%v (kept %s)", err, dir)
	}
	defer func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	}()
	res.PrintTable(t.Output())
	if res.Programmed > time.Minute {
		t.Errorf("every policy Programmed %s after the first was applied, want within a minute", res.Programmed)
	}
	if p := Percentile(res.DelayPush, 0.99); p > 5*time.Second {
		t.Errorf("delay change to Envoy p99 %s, want within 5s", p)
	}
	if p := Percentile(res.EndpointPush, 0.99); p > 5*time.Second {
		t.Errorf("endpoint change to Envoy with Prometheus hung p99 %s, want within 5s", p)
	}
	if res.RestRSSMiB > 250 || res.ResyncPeakRSSMiB > 250 {
		t.Errorf("operator RSS %.0f MiB at rest, %.0f MiB peak in a resync, want at most 250", res.RestRSSMiB, res.ResyncPeakRSSMiB)
	}
	if res.QueriesPerInterval > 10 {
		t.Errorf("%.1f Prometheus queries per evaluation interval, want at most 10", res.QueriesPerInterval)
	}
	if res.ResyncReady > time.Minute {
		t.Errorf("a restarted operator served every policy after %s, want within a minute", res.ResyncReady)
	}
}
