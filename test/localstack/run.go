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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/verify"
)

// PolicyName is the HedgePolicy the stack applies.
const PolicyName = "workload"

// ApplyPolicy creates the demo's Auto HedgePolicy: the default source (the
// hedged route's own traffic in Envoy), p95, a 5% budget, a 30s window
// evaluated every 5 seconds.
func (s *Stack) ApplyPolicy(ctx context.Context, mutate func(*tailcutv1alpha1.HedgePolicySpec)) (*tailcutv1alpha1.HedgePolicy, error) {
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: PolicyName},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Name: Service, Port: Port},
			Delay: tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeAuto, Auto: &tailcutv1alpha1.AutoDelay{
				Window:     &metav1.Duration{Duration: 30 * time.Second},
				StaleAfter: &metav1.Duration{Duration: time.Minute},
				MinSamples: 200,
			}},
			EvaluationInterval: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
	if mutate != nil {
		mutate(&p.Spec)
	}
	return p, s.Client.Create(ctx, p)
}

// Policy reads the policy.
func (s *Stack) Policy(ctx context.Context) (*tailcutv1alpha1.HedgePolicy, error) {
	var p tailcutv1alpha1.HedgePolicy
	return &p, s.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: PolicyName}, &p)
}

// WaitReady sends ordinary warm-up traffic (no bypass header: what real
// clients send) until the policy shows a delay derived from Prometheus that
// Envoy acknowledged and that has not moved for Settled, reporting progress.
func (s *Stack) WaitReady(parent context.Context, rps int, timeout time.Duration) (*tailcutv1alpha1.HedgePolicy, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.warmup(ctx, rps) })
	defer wg.Wait()
	defer cancel()
	last, conditions := "", ""
	for {
		p, err := s.Policy(ctx)
		if err == nil {
			conditions = conditionsLine(p)
			derived := meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionDelayDerived)
			ready := meta.IsStatusConditionTrue(p.Status.Conditions, tailcutv1alpha1.ConditionReady)
			line := fmt.Sprintf("waiting for a settled delay: DelayDerived=%v Ready=%v delay=%s (%s)", derived, ready, durationOrNone(p.Status.EffectiveDelay), p.Status.DelayReason)
			if line != last {
				s.logf("%s", line)
				last = line
			}
			// Measure only a settled controller: the delay moves by at most
			// maxStepPercent per evaluation, so a first estimate from few samples
			// takes a few intervals to converge.
			settled := Settled(p)
			if derived && ready && p.Status.DelaySource == tailcutv1alpha1.DelaySourcePrometheus && settled {
				return p, nil
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return nil, fmt.Errorf("interrupted while waiting for the policy: %w", parent.Err())
			}
			return nil, fmt.Errorf("the policy was not Ready with a delay from Prometheus within %s; last status: %s; conditions: %s; logs in %s", timeout, last, conditions, s.dir("logs"))
		case <-time.After(time.Second):
		}
	}
}

// Settled reports whether the controller has come to rest: the delay has
// stayed unchanged for two and a half evaluation intervals (the step limit
// moves it at most once per interval), and the hedge rate was measured at that
// very delay, over at least two intervals, within the budget plus the one point
// the A/B verdict allows. A run measured earlier may see a delay still on its
// way, or one the budget guard is about to raise.
func Settled(p *tailcutv1alpha1.HedgePolicy) bool {
	interval := p.Spec.EffectiveEvaluationInterval()
	st := p.Status
	if st.LastDelayChange == nil || st.EffectiveDelay == nil || time.Since(st.LastDelayChange.Time) < interval*5/2 {
		return false
	}
	r := st.HedgeRate
	if r == nil || r.Delay == nil || r.Delay.Duration != st.EffectiveDelay.Duration || r.Since == nil {
		return false
	}
	return r.SampledAt.Sub(r.Since.Time) >= 2*interval && r.Percent <= float64(r.BudgetPercent)+1
}

// conditionsLine is every condition of the policy, for a failed wait.
func conditionsLine(p *tailcutv1alpha1.HedgePolicy) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

func durationOrNone(d *metav1.Duration) string {
	if d == nil {
		return "none"
	}
	return d.Duration.String()
}

// warmup sends ordinary requests through Envoy, rps per second on average,
// until ctx ends, so Prometheus has latency samples before the measured run.
// They leave at exponential intervals, as from many independent clients: at
// a ticker's steady pace they kept step with Prometheus's steady scrapes, so
// every scrape caught each endpoint at the same point of its cycle (in one
// CI run 1, 0 and 6 requests in flight at all 144 scrapes), which no real
// traffic does and which per-endpoint readings are not made for.
func (s *Stack) warmup(ctx context.Context, rps int) {
	rng := rand.New(rand.NewPCG(uint64(rps), 0x3a2b))
	url := "http://" + addr(s.opts.Ports.Listener) + "/"
	next := time.Now()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / float64(rps) * float64(time.Second)))
		wait.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Host = Host()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}

// Shift installs cfg on every replica (PUT /config), as a deploy that changes
// the service's latency would.
func (s *Stack) Shift(ctx context.Context, cfg map[string]any) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	for _, port := range s.opts.Ports.Workloads {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+addr(port)+"/config", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("PUT /config on %s: %s: %s", addr(port), resp.Status, b)
		}
	}
	return nil
}

// Host is the Host header that names the Service.
func Host() string { return Service + "." + Namespace }

// ABOptions configure the A/B run.
type ABOptions struct {
	Rate        int
	Duration    time.Duration
	Settle      time.Duration
	MaxP99Ratio float64
	PostRate    int
	// Unhedged is the reference arm: verify.ArmBypass (the bypass route
	// through the same Envoy, the default) or verify.ArmDirect (straight to
	// the replicas).
	Unhedged string
	// Keys, when set, gives every GET a cache key (verify.Keys).
	Keys *verify.Keys
	// Via, when set, is another Envoy the A/B goes through instead of the
	// stack's.
	Via *Proxy
}

// Proxy is an Envoy's listener and admin ports.
type Proxy struct{ Listener, Admin int }

// Verify runs `tailcut verify` (the same code, in process) against the stack:
// the extra load from Envoy's admin counters and from the replicas' own, the
// budget from the policy.
func (s *Stack) Verify(ctx context.Context, o ABOptions, policy *tailcutv1alpha1.HedgePolicy) (*verify.Report, error) {
	via := Proxy{Listener: s.opts.Ports.Listener, Admin: s.opts.Ports.Admin}
	if o.Via != nil {
		via = *o.Via
	}
	vo := verify.Options{
		URL: "http://" + addr(via.Listener) + "/", Host: Host(), Unhedged: o.Unhedged,
		Rate: o.Rate, PostRate: o.PostRate, Settle: o.Settle, Duration: o.Duration,
		Criteria: verify.DefaultCriteria(), Limits: verify.DefaultLimits(),
		EnvoyAdmin: []string{"http://" + addr(via.Admin)},
		Policy:     Namespace + "/" + PolicyName, Scenario: s.opts.Scenario.Name,
		Keys: o.Keys,
	}
	if vo.Unhedged == "" {
		vo.Unhedged = verify.ArmBypass
	}
	if o.MaxP99Ratio > 0 {
		vo.Criteria.MaxP99Ratio = o.MaxP99Ratio
	}
	budget := float64(policy.Spec.EffectiveBudget().MaxExtraLoadPercent)
	vo.BudgetPct = &budget
	vo.HedgedCluster, vo.UnhedgedCluster = verify.ClustersOf(Namespace, Service, Port)
	for _, port := range s.opts.Ports.Workloads {
		vo.WorkloadMetrics = append(vo.WorkloadMetrics, "http://"+addr(port)+"/metrics")
		vo.DirectURLs = append(vo.DirectURLs, "http://"+addr(port))
	}
	return verify.Run(ctx, vo)
}

// RunAB runs the A/B, with the scenario's phases, and returns its report
// together with the policy as it stood at the end of the run.
func (s *Stack) RunAB(ctx context.Context, o ABOptions) (Report, *tailcutv1alpha1.HedgePolicy, error) {
	before, err := s.Policy(ctx)
	if err != nil {
		return Report{}, nil, err
	}
	phases := s.opts.Scenario.Phases
	if len(phases) > 0 {
		length := o.Settle + o.Duration
		// Every run starts from the scenario's own model.
		if err := s.Shift(ctx, s.opts.Scenario.ReplicaConfig(0)); err != nil {
			return Report{}, nil, err
		}
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		start := time.Now()
		go func() {
			for _, ph := range phases {
				select {
				case <-runCtx.Done():
					return
				case <-time.After(time.Until(start.Add(time.Duration(ph.At * float64(length))))):
				}
				if err := s.Shift(runCtx, ph.Config); err != nil && runCtx.Err() == nil {
					s.logf("phase at %.0f%% of the run: %v", 100*ph.At, err)
				}
			}
		}()
	}
	vr, err := s.Verify(ctx, o, before)
	if err != nil {
		return Report{}, nil, err
	}
	policy, err := s.Policy(ctx)
	if err != nil {
		return Report{}, nil, err
	}
	return NewReport(vr, policy), policy, nil
}

// Get returns the JSON value at a dotted path, or nil.
func Get(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// Float returns the number at a dotted path, or -1.
func Float(m map[string]any, path string) float64 {
	if f, ok := Get(m, path).(float64); ok {
		return f
	}
	return -1
}
