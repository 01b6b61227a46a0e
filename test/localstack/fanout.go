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
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// FanOutOptions configure RunFanOut.
type FanOutOptions struct {
	Dir string
	// Scenario is the workload; #26 asks for bimodal3.
	Scenario Scenario
	// Rate is GETs per second per arm; PostRate the POSTs per second sent
	// beside them, which no configuration may copy.
	Rate, PostRate int
	Duration       time.Duration
	Logf           func(string, ...any)
}

// FanOutRun is one configuration's A/B.
type FanOutRun struct {
	Config    string
	MaxHedges int32
	// BudgetPct is the policy's maxExtraLoadPercent.
	BudgetPct int32
	FanOut    bool
	Report    Report
}

// The configurations RunFanOut measures, in order.
const (
	FanOutAutoHedge = "one hedge at the auto delay"
	FanOutOneCopy   = "fan-out, 1 copy"
	FanOutTwoCopies = "fan-out, 2 copies"
)

// RunFanOut measures on one stack, one after the other: the default Auto
// policy (one hedge, 5% budget) once its delay has settled, then the same
// policy switched to delay.mode FanOut with one copy (100% budget) and with
// two (200%). Every run sends POSTs beside the GETs.
func RunFanOut(ctx context.Context, o FanOutOptions) ([]FanOutRun, error) {
	ports, err := ReservePorts()
	if err != nil {
		return nil, err
	}
	stack, err := Start(ctx, Options{Dir: o.Dir, Ports: ports, Scenario: o.Scenario, Log: o.Logf})
	if err != nil {
		return nil, err
	}
	defer stack.Stop()
	if _, err := stack.ApplyPolicy(ctx, nil); err != nil {
		return nil, err
	}
	if _, err := stack.WaitReady(ctx, o.Rate, 3*time.Minute); err != nil {
		return nil, err
	}
	var runs []FanOutRun
	for _, c := range []FanOutRun{
		{Config: FanOutAutoHedge, MaxHedges: 1, BudgetPct: tailcutv1alpha1.DefaultMaxExtraLoadPercent},
		{Config: FanOutOneCopy, MaxHedges: 1, BudgetPct: 100, FanOut: true},
		{Config: FanOutTwoCopies, MaxHedges: 2, BudgetPct: 200, FanOut: true},
	} {
		if c.FanOut {
			if err := stack.setFanOut(ctx, c.MaxHedges, c.BudgetPct); err != nil {
				return nil, err
			}
			if err := stack.waitProgrammed(ctx, time.Minute); err != nil {
				return nil, err
			}
		}
		o.Logf("%s: A/B for %s", c.Config, o.Duration)
		r, _, err := stack.RunAB(ctx, ABOptions{Rate: o.Rate, PostRate: o.PostRate, Duration: o.Duration})
		if err != nil {
			return nil, err
		}
		if c.FanOut && r.DelaySource != string(tailcutv1alpha1.DelaySourceFanOut) {
			return nil, fmt.Errorf("%s: the policy's delay came from %q, not FanOut: %s", c.Config, r.DelaySource, r.DelayReason)
		}
		c.Report = r
		runs = append(runs, c)
	}
	return runs, nil
}

// setFanOut switches the policy to delay.mode FanOut.
func (s *Stack) setFanOut(ctx context.Context, maxHedges, budgetPct int32) error {
	p, err := s.Policy(ctx)
	if err != nil {
		return err
	}
	base := p.DeepCopy()
	p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeFanOut}
	p.Spec.MaxHedges = maxHedges
	p.Spec.Budget.MaxExtraLoadPercent = budgetPct
	return s.Client.Patch(ctx, p, client.MergeFrom(base))
}
