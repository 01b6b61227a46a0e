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

package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server applies the defaults below from the CRD schema. The controller
// still reads policies through these helpers so that an object that skipped
// defaulting (a unit test, an old stored object) behaves the same way.

// EffectiveAuto returns spec.delay.auto with every unset field defaulted.
func (s *HedgePolicySpec) EffectiveAuto() AutoDelay {
	var a AutoDelay
	if s.Delay.Auto != nil {
		a = *s.Delay.Auto.DeepCopy()
	}
	if a.Quantile == 0 {
		a.Quantile = DefaultQuantile
	}
	if a.Source == "" {
		a.Source = EstimateSourceEnvoy
	}
	a.Window = durationOr(a.Window, DefaultWindow)
	a.Min = durationOr(a.Min, DefaultMinDelay)
	a.Max = durationOr(a.Max, DefaultMaxDelay)
	a.StaleAfter = durationOr(a.StaleAfter, DefaultStaleAfter)
	if a.Fallback == nil {
		a.Fallback = &Fallback{Action: FallbackDisable}
	}
	if a.MinSamples == 0 {
		a.MinSamples = DefaultMinSamples
	}
	if a.MaxStepPercent == 0 {
		a.MaxStepPercent = DefaultMaxStepPercent
	}
	if a.Source == EstimateSourceWorkload {
		if a.Workload == nil {
			a.Workload = &WorkloadMetric{}
		}
		if a.Workload.Metric == "" {
			a.Workload.Metric = DefaultWorkloadMetric
		}
	}
	return a
}

// EffectiveMatch returns spec.match with defaults applied.
func (s *HedgePolicySpec) EffectiveMatch() Match {
	m := Match{PathPrefix: "/", Methods: []HTTPMethod{"GET", "HEAD"}}
	if s.Match != nil {
		if s.Match.PathPrefix != "" {
			m.PathPrefix = s.Match.PathPrefix
		}
		if len(s.Match.Methods) > 0 {
			m.Methods = append([]HTTPMethod(nil), s.Match.Methods...)
		}
	}
	return m
}

// EffectiveEvaluationInterval returns spec.evaluationInterval, defaulted.
func (s *HedgePolicySpec) EffectiveEvaluationInterval() time.Duration {
	if s.EvaluationInterval != nil && s.EvaluationInterval.Duration > 0 {
		return s.EvaluationInterval.Duration
	}
	return mustParse(DefaultEvaluationInterval)
}

// EffectiveBudget returns spec.budget, defaulted.
func (s *HedgePolicySpec) EffectiveBudget() Budget {
	b := s.Budget
	if b.MaxExtraLoadPercent == 0 {
		b.MaxExtraLoadPercent = DefaultMaxExtraLoadPercent
	}
	if b.MinRetryConcurrency == 0 {
		b.MinRetryConcurrency = DefaultMinRetryConcurrency
	}
	return b
}

// EffectiveRetryOn returns spec.retryOn, defaulted.
func (s *HedgePolicySpec) EffectiveRetryOn() []RetryOn {
	if len(s.RetryOn) == 0 {
		return []RetryOn{"reset", "connect-failure"}
	}
	return append([]RetryOn(nil), s.RetryOn...)
}

// EffectiveMaxHedges returns spec.maxHedges, defaulted.
func (s *HedgePolicySpec) EffectiveMaxHedges() int32 {
	if s.MaxHedges == 0 {
		return 1
	}
	return s.MaxHedges
}

// EffectiveDelayMode returns spec.delay.mode, defaulted.
func (s *HedgePolicySpec) EffectiveDelayMode() DelayMode {
	if s.Delay.Mode == "" {
		return DelayModeAuto
	}
	return s.Delay.Mode
}

// EffectivePublishTarget returns spec.publish.target, defaulted.
func (s *HedgePolicySpec) EffectivePublishTarget() PublishTarget {
	if s.Publish.Target == "" {
		return PublishXDS
	}
	return s.Publish.Target
}

// EffectiveAffinity returns spec.affinity with its load balancer and the
// load balancer's size defaulted, or nil when the policy sets none.
func (s *HedgePolicySpec) EffectiveAffinity() *Affinity {
	if s.Affinity == nil {
		return nil
	}
	a := s.Affinity.DeepCopy()
	if a.LoadBalancer == "" {
		a.LoadBalancer = LoadBalancerRingHash
	}
	if a.LoadBalancer == LoadBalancerMaglev && a.TableSize == nil {
		a.TableSize = ptrTo(int32(DefaultTableSize))
	}
	if a.LoadBalancer == LoadBalancerRingHash && a.RingSize == nil {
		a.RingSize = ptrTo(int32(DefaultRingSize))
	}
	return a
}

func ptrTo[T any](v T) *T { return &v }

func durationOr(d *metav1.Duration, def string) *metav1.Duration {
	if d != nil && d.Duration > 0 {
		return d
	}
	return &metav1.Duration{Duration: mustParse(def)}
}

func mustParse(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}
