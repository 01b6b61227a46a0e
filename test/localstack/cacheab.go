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
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/verify"
)

// The cache benchmark's configurations.
const (
	CacheNoHedging = "affinity, no hedging"
	// CacheNoAffinity is tailcut without affinity: round robin for every
	// attempt, so every replica caches the hot keys.
	CacheNoAffinity = "no affinity, hedging to any other replica"
	// CacheAnyReplica keeps the keys on their owners and hedges to any
	// replica (anyreplica.go): what #27 compares the next owner with.
	CacheAnyReplica = "affinity, hedging to any replica"
	CacheNextOwner  = "affinity, hedging to the key's next owner"
)

// CacheABOptions configure RunCacheAB.
type CacheABOptions struct {
	Dir string
	// Rate is requests per second per arm; Warm the unmeasured run that
	// fills the caches first, Duration the measured one.
	Rate           int
	Warm, Duration time.Duration
	// Keys, Zipf and CacheSize: the key distribution, and each replica's
	// cache (test/workload's cache model).
	Keys      int
	Zipf      float64
	CacheSize int
	Logf      func(string, ...any)
}

// CacheModel is the replicas' workload: a hit 15 ms, a miss 60 ms, and 3% of
// the requests 100 ms slower on top (a pause), which hedging can hide.
func (o CacheABOptions) CacheModel() map[string]any {
	return map[string]any{"model": "cache", "base": "15ms", "missExtra": "45ms", "slowProbability": 0.03, "slowExtra": "100ms", "cacheSize": o.CacheSize}
}

// CacheRun is one configuration's measured run.
type CacheRun struct {
	Config string
	// Delay is the static hedge delay, 0 without hedging.
	Delay  time.Duration
	Report Report
}

// HitRatio is the share of the replicas' cache lookups that hit over the
// measured run (both arms, hedges included).
func (r CacheRun) HitRatio() float64 {
	hit, _ := r.Report.ExtraLoad.Replicas.CacheHitRatio()
	return hit
}

// autoMargin is the margin an Auto policy puts on its quantile
// (controllers/estimate).
const autoMargin = 1.1

// RunCacheAB runs the four configurations, each on a stack of its own (the
// caches start empty): first without hedging, whose hedged arm's p95, with
// an Auto policy's 10% margin, is the static delay of the others. A static
// delay keeps the hedged runs comparable.
func RunCacheAB(ctx context.Context, o CacheABOptions) ([]CacheRun, error) {
	var runs []CacheRun
	var delay time.Duration
	for _, config := range []string{CacheNoHedging, CacheNoAffinity, CacheAnyReplica, CacheNextOwner} {
		r, err := runCache(ctx, o, config, delay)
		if err != nil {
			return runs, fmt.Errorf("%s: %w", config, err)
		}
		if config == CacheNoHedging {
			delay = time.Duration(r.Report.Hedged().P95 * autoMargin * float64(time.Millisecond)).Round(time.Millisecond)
		}
		o.Logf("%s: hit ratio %.1f%%; hedged arm p50 %.1f ms, p99 %.1f ms; extra load %.2f%%; errors %d",
			config, 100*r.HitRatio(), r.Report.Hedged().P50, r.Report.Hedged().P99, r.Report.ExtraLoadPct(), r.Report.Errors())
		runs = append(runs, r)
	}
	return runs, nil
}

func runCache(ctx context.Context, o CacheABOptions, config string, delay time.Duration) (CacheRun, error) {
	ports, err := ReservePorts()
	if err != nil {
		return CacheRun{}, err
	}
	model := o.CacheModel()
	sc := Scenario{Name: "cache", HedgingHelps: true, Description: "cache: a hit 15ms, a miss 60ms, 3% of requests 100ms slower", config: same(model)}
	stack, err := Start(ctx, Options{Dir: filepath.Join(o.Dir, strings.ReplaceAll(strings.ReplaceAll(config, " ", "-"), ",", "")), Ports: ports, Scenario: sc, Log: o.Logf})
	if err != nil {
		return CacheRun{}, err
	}
	defer stack.Stop()
	policy, err := stack.ApplyPolicy(ctx, func(spec *tailcutv1alpha1.HedgePolicySpec) {
		if config != CacheNoAffinity {
			spec.Affinity = &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Header: cacheKeyHeader}}
		}
		if config == CacheNoHedging {
			spec.Suspend = true
			return
		}
		spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: &metav1.Duration{Duration: delay}}
	})
	if err != nil {
		return CacheRun{}, err
	}
	if err := stack.waitProgrammed(ctx, time.Minute); err != nil {
		return CacheRun{}, err
	}
	keys := &verify.Keys{Header: cacheKeyHeader, Count: o.Keys, Exponent: o.Zipf}
	ab := ABOptions{Rate: o.Rate, Duration: o.Warm, Keys: keys}
	if config == CacheAnyReplica {
		proxy, via, err := stack.startAnyReplicaProxy(ctx, policy, delay)
		if err != nil {
			return CacheRun{}, err
		}
		defer proxy.Stop(5 * time.Second)
		ab.Via = &via
	}
	o.Logf("%s: filling the caches for %s", config, o.Warm)
	if _, err := stack.Verify(ctx, ab, policy); err != nil {
		return CacheRun{}, err
	}
	ab.Duration = o.Duration
	o.Logf("%s: measuring for %s", config, o.Duration)
	vr, err := stack.Verify(ctx, ab, policy)
	if err != nil {
		return CacheRun{}, err
	}
	if _, ok := vr.ExtraLoad.Replicas.CacheHitRatio(); !ok {
		return CacheRun{}, fmt.Errorf("the replicas counted no cache lookup: %+v", vr.ExtraLoad.Replicas)
	}
	if config == CacheNoHedging {
		delay = 0
	}
	return CacheRun{Config: config, Delay: delay, Report: NewReport(vr, policy)}, nil
}

// waitProgrammed waits until Envoy runs the policy's current generation.
func (s *Stack) waitProgrammed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p, err := s.Policy(ctx)
		if err == nil {
			c := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionProgrammed)
			if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation && p.Status.ObservedGeneration == p.Generation {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy was not Programmed within %s: %v", timeout, p.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
