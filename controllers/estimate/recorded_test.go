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

package estimate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// recordedTick is one sampler tick as a real Prometheus answered it.
type recordedTick struct {
	At       time.Time          `json:"at"`
	Scraped  time.Time          `json:"scraped"`
	Buckets  map[string]float64 `json:"buckets"`
	Retries  float64            `json:"retries"`
	Attempts float64            `json:"attempts"`
}

// loadTicks fills a sampler memory with recorded ticks of one cluster. The
// recording holds what the sampler read then, the cluster's counts summed
// over the proxies; they are loaded as one proxy's series. No count falls
// from one recorded tick to the next, so the per-proxy arithmetic reads them
// as the summing sampler did.
func loadTicks(t *testing.T, file, cluster string) *memory {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var ticks []recordedTick
	if err := json.Unmarshal(b, &ticks); err != nil {
		t.Fatal(err)
	}
	m := newMemory()
	for i, rt := range ticks {
		if i > 0 {
			prev := ticks[i-1]
			fell := rt.Retries < prev.Retries || rt.Attempts < prev.Attempts
			for le, v := range rt.Buckets {
				fell = fell || v < prev.Buckets[le]
			}
			if fell {
				t.Fatalf("%s: the sums fall at %s; they cannot be read as one proxy's counts", file, rt.At)
			}
		}
		m.add(envoyTick{at: rt.At, clusters: map[string]*clusterTotals{cluster: {
			series:  map[uint64]*seriesTotals{1: {buckets: rt.Buckets, retries: rt.Retries, attempts: rt.Attempts, counters: true}},
			scraped: rt.Scraped,
		}}}, time.Hour, nil)
	}
	return m
}

// TestRecordedShiftBackIsNotQueueing replays what the sampler read from a
// real Prometheus during TestOrdinaryTraffic (testdata/shift-back-ticks.json,
// ticks every 2.5s): the workload's fast mode went from 15 to 40ms at
// 15:38:18 and back to 15ms at 15:38:48, with 150 ordinary requests per
// second, and the delay was 50.6ms from 15:38:42. At 15:38:52.5 the span and
// the last interval mix 40ms requests from before the shift back with 15ms
// ones after it: the median is up and the 10th percentile is not, which is
// what queueing looks like too. Hedging paused (HedgingHurts) for 30s; the
// interval before the last, all at 40ms, shows it was a slower service.
func TestRecordedShiftBackIsNotQueueing(t *testing.T) {
	const cluster = "tailcut_demo_workload_80"
	p := testPolicy(localStack)
	p.Namespace, p.Name = "demo", "workload"
	p.Spec.TargetRef.Name, p.Spec.TargetRef.Port = "workload", 80
	p.Status.EffectiveDelay = &metav1.Duration{Duration: 50600 * time.Microsecond}
	p.Status.DelaySource = tailcutv1alpha1.DelaySourcePrometheus
	p.Status.LastDelayChange = &metav1.Time{Time: time.Date(2026, 11, 23, 15, 38, 42, 0, time.UTC)}
	est := newPrometheus(nil, 0)
	est.memory = loadTicks(t, "shift-back-ticks.json", cluster)
	now := time.Date(2026, 11, 23, 15, 38, 52, 500_000_000, time.UTC)
	res, err := est.Estimate(context.Background(), p, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.DerivedReason == tailcutv1alpha1.ReasonHedgingHurts || res.Delay == 0 {
		t.Errorf("got %s (%s: %s), want hedging to go on: the service got faster, nothing queued", res.Delay, res.DerivedReason, res.Reason)
	}
	t.Logf("%s: %s", res.Delay, res.Reason)
}
