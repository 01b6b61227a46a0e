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
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// now is the injected evaluation time of every fake-Prometheus test.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// fastTarget is the delay for 3% slow requests over a 15ms fast mode: the p95.
var fastTarget = round(histogramQuantile(5000, bimodal(15, 0.03), 0.95))

func testPolicy(muts ...func(*tailcutv1alpha1.HedgePolicy)) *tailcutv1alpha1.HedgePolicy {
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-hedge", Generation: 1},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef: tailcutv1alpha1.TargetRef{Kind: "Service", Name: "cart", Port: 8080},
			Delay: tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeAuto, Auto: &tailcutv1alpha1.AutoDelay{
				// The API server defaults this; EffectiveAuto leaves 0 alone
				// because 0 (no deadband) is a valid choice.
				DeadbandPercent: 10,
			}},
			EvaluationInterval: &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	for _, m := range muts {
		m(p)
	}
	return p
}

func auto(f func(a *tailcutv1alpha1.AutoDelay)) func(*tailcutv1alpha1.HedgePolicy) {
	return func(p *tailcutv1alpha1.HedgePolicy) { f(p.Spec.Delay.Auto) }
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func fallbackStatic(d time.Duration) func(*tailcutv1alpha1.HedgePolicy) {
	return auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Fallback = &tailcutv1alpha1.Fallback{Action: tailcutv1alpha1.FallbackStatic, Delay: dur(d)}
	})
}

// prior sets the previous decision the way the controller leaves it in status:
// the delay in force and its source, when the last good quantile was read, and
// when the delay last changed.
func prior(delay time.Duration, src tailcutv1alpha1.DelaySource, sampledAgo, changedAgo time.Duration) func(*tailcutv1alpha1.HedgePolicy) {
	return func(p *tailcutv1alpha1.HedgePolicy) {
		st := &p.Status
		if delay > 0 {
			st.EffectiveDelay = dur(delay)
		}
		st.DelaySource = src
		if sampledAgo >= 0 {
			st.Quantile = &tailcutv1alpha1.QuantileObservation{Quantile: 0.95, Value: metav1.Duration{Duration: delay},
				Samples: 5000, SampledAt: metav1.NewTime(now.Add(-sampledAgo))}
		}
		if changedAgo >= 0 {
			t := metav1.NewTime(now.Add(-changedAgo))
			st.LastDelayChange = &t
		}
	}
}

func derivedCondition(reason string) func(*tailcutv1alpha1.HedgePolicy) {
	return func(p *tailcutv1alpha1.HedgePolicy) {
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: tailcutv1alpha1.ConditionDelayDerived,
			Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: p.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
}

func newTestEstimator(t *testing.T, f *fakeProm, timeout time.Duration) *Prometheus {
	t.Helper()
	p, err := NewPrometheus(PrometheusOptions{Address: f.srv.URL, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// world answers the delay-path queries for n requests distributed by F.
func (f *fakeProm) world(n float64, F func(float64) float64) {
	f.set(kQuantile, one(histogramQuantile(n, F, 0.95)))
	f.set(kBuckets, bucketsReply(n, F))
	f.set(kCount, one(n))
}

// hedging answers the hedge counters: retries extra attempts per requests.
func (f *fakeProm) hedging(requests, retries float64) {
	f.set(kRetries, one(retries))
	f.set(kAttempts, one(requests+retries))
}

// checkInvariants holds for every Result: hedging off means no delay and
// source None; otherwise the delay is finite and within [min, max].
func checkInvariants(t *testing.T, p *tailcutv1alpha1.HedgePolicy, res Result) {
	t.Helper()
	a := p.Spec.EffectiveAuto()
	switch {
	case res.Source == tailcutv1alpha1.DelaySourceNone:
		if res.Delay != 0 {
			t.Errorf("source None with delay %s", res.Delay)
		}
	case res.Delay < a.Min.Duration || res.Delay > a.Max.Duration:
		t.Errorf("delay %s outside [%s, %s] (source %s)", res.Delay, a.Min.Duration, a.Max.Duration, res.Source)
	}
	if res.Reason == "" || strings.ContainsAny(res.Reason, "\n") || len(res.Reason) > 1024 {
		t.Errorf("reason must be one non-empty line under 1024 characters: %q", res.Reason)
	}
	if res.DerivedReason == "" {
		t.Errorf("DerivedReason is empty")
	}
}

func counterValue(t *testing.T, policy, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := estimateErrors.WithLabelValues(policy, reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestNoData covers every case in which no trustworthy delay can be read: each
// has its reason, keeps a fresh last good delay, and otherwise falls back.
func TestNoData(t *testing.T) {
	good := bimodal(15, 0.03)
	cases := []struct {
		name   string
		policy []func(*tailcutv1alpha1.HedgePolicy)
		setup  func(f *fakeProm)
		reason string
		// timeout is the per-query timeout; zero means the 5s default.
		timeout time.Duration
	}{
		{name: "NaN quantile", setup: func(f *fakeProm) { f.set(kQuantile, one(math.NaN())) }, reason: tailcutv1alpha1.ReasonQuantileNaN},
		{name: "empty quantile", setup: func(f *fakeProm) { f.set(kQuantile, reply{body: vectorJSON()}) }, reason: tailcutv1alpha1.ReasonNoData},
		{name: "several series", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{body: vectorJSON(sample{map[string]string{"pod": "a"}, 0.02}, sample{map[string]string{"pod": "b"}, 0.03})})
		}, reason: tailcutv1alpha1.ReasonMultipleSeries},
		{name: "+Inf quantile", setup: func(f *fakeProm) { f.set(kQuantile, one(math.Inf(1))) }, reason: tailcutv1alpha1.ReasonQuantileInfinite},
		{name: "negative quantile", setup: func(f *fakeProm) { f.set(kQuantile, one(-0.01)) }, reason: tailcutv1alpha1.ReasonQuantileNegative},
		{name: "above 10x max", setup: func(f *fakeProm) { f.set(kQuantile, one(10.5)) }, reason: tailcutv1alpha1.ReasonQuantileAbsurd},
		{name: "above 60s", policy: []func(*tailcutv1alpha1.HedgePolicy){auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(10 * time.Second) })},
			setup: func(f *fakeProm) { f.set(kQuantile, one(61)) }, reason: tailcutv1alpha1.ReasonQuantileAbsurd},
		{name: "too few samples", setup: func(f *fakeProm) { f.set(kCount, one(99)) }, reason: tailcutv1alpha1.ReasonTooFewSamples},
		{name: "no count series", setup: func(f *fakeProm) { f.set(kCount, reply{body: vectorJSON()}) }, reason: tailcutv1alpha1.ReasonNoData},
		{name: "no bucket series", setup: func(f *fakeProm) { f.set(kBuckets, reply{body: vectorJSON()}) }, reason: tailcutv1alpha1.ReasonNoData},
		{name: "timeout", setup: func(f *fakeProm) { f.set(kQuantile, reply{hang: true}) }, reason: tailcutv1alpha1.ReasonQueryTimeout,
			timeout: 300 * ms},
		{name: "HTTP 500", setup: func(f *fakeProm) { f.set(kQuantile, reply{code: 500, body: "internal error"}) }, reason: tailcutv1alpha1.ReasonPrometheusHTTPError},
		{name: "HTTP 503 on count", setup: func(f *fakeProm) { f.set(kCount, reply{code: 503, body: "overloaded"}) }, reason: tailcutv1alpha1.ReasonPrometheusHTTPError},
		{name: "bad JSON", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{body: `{"status":"success","data":{"resultType":"vector","result":[{`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "malformed data", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{body: `{"status":"success","data":{"resultType":"vector","result":"oops"}}`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "unknown result type", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{body: `{"status":"success","data":{"resultType":"weird","result":[]}}`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "string result", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{body: `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "not JSON", setup: func(f *fakeProm) { f.set(kQuantile, reply{body: `<html>proxy error</html>`}) }, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "query rejected", setup: func(f *fakeProm) {
			f.set(kQuantile, reply{code: 422, body: `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`})
		}, reason: tailcutv1alpha1.ReasonQueryFailed},
	}
	priors := []struct {
		name       string
		policy     []func(*tailcutv1alpha1.HedgePolicy)
		wantSource tailcutv1alpha1.DelaySource
		wantDelay  time.Duration
	}{
		{name: "fresh last good", policy: []func(*tailcutv1alpha1.HedgePolicy){prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Minute, time.Hour)},
			wantSource: tailcutv1alpha1.DelaySourceLastKnown, wantDelay: 20 * ms},
		{name: "last known again", policy: []func(*tailcutv1alpha1.HedgePolicy){prior(20*ms, tailcutv1alpha1.DelaySourceLastKnown, 4*time.Minute, time.Hour)},
			wantSource: tailcutv1alpha1.DelaySourceLastKnown, wantDelay: 20 * ms},
		{name: "stale, fallback static", policy: []func(*tailcutv1alpha1.HedgePolicy){fallbackStatic(40 * ms),
			prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, 5*time.Minute+time.Second, time.Hour)},
			wantSource: tailcutv1alpha1.DelaySourceFallback, wantDelay: 40 * ms},
		{name: "stale, fallback disable", policy: []func(*tailcutv1alpha1.HedgePolicy){
			prior(20*ms, tailcutv1alpha1.DelaySourceLastKnown, 10*time.Minute, time.Hour)},
			wantSource: tailcutv1alpha1.DelaySourceNone},
		{name: "never derived", wantSource: tailcutv1alpha1.DelaySourceNone},
		{name: "fallback delay in force is not a good delay", policy: []func(*tailcutv1alpha1.HedgePolicy){fallbackStatic(40 * ms),
			prior(40*ms, tailcutv1alpha1.DelaySourceFallback, time.Minute, time.Hour)},
			wantSource: tailcutv1alpha1.DelaySourceFallback, wantDelay: 40 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, pr := range priors {
				t.Run(pr.name, func(t *testing.T) {
					f := newFakeProm(t)
					f.world(5000, good)
					tc.setup(f)
					policy := testPolicy(append(append([]func(*tailcutv1alpha1.HedgePolicy){}, tc.policy...), pr.policy...)...)
					est := newTestEstimator(t, f, tc.timeout)
					before := counterValue(t, policyLabel(policy), tc.reason)
					res, err := est.Estimate(context.Background(), policy, now)
					if err != nil {
						t.Fatalf("metric outage returned an error: %v", err)
					}
					checkInvariants(t, policy, res)
					if res.Derived || res.DerivedReason != tc.reason {
						t.Errorf("Derived=%v reason %q, want false %q (%s)", res.Derived, res.DerivedReason, tc.reason, res.Reason)
					}
					if !strings.Contains(res.Reason, tc.reason) {
						t.Errorf("reason text %q does not name %s", res.Reason, tc.reason)
					}
					if res.Source != pr.wantSource || res.Delay != pr.wantDelay {
						t.Errorf("got %s from %s, want %s from %s (%s)", res.Delay, res.Source, pr.wantDelay, pr.wantSource, res.Reason)
					}
					if res.Quantile != nil {
						t.Errorf("an untrusted reading was reported as the quantile: %+v", res.Quantile)
					}
					if got := counterValue(t, policyLabel(policy), tc.reason); got != before+1 {
						t.Errorf("tailcut_estimate_errors_total{reason=%q} = %v, want %v", tc.reason, got, before+1)
					}
				})
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	est, err := NewPrometheus(PrometheusOptions{Address: addr, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	policy := testPolicy(prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Minute, time.Hour))
	res, err := est.Estimate(context.Background(), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, policy, res)
	if res.DerivedReason != tailcutv1alpha1.ReasonQueryFailed || res.Source != tailcutv1alpha1.DelaySourceLastKnown || res.Delay != 20*ms {
		t.Errorf("got %s from %s (%s: %s), want 20ms LastKnown QueryFailed", res.Delay, res.Source, res.DerivedReason, res.Reason)
	}
}

func TestLastKnownIsClamped(t *testing.T) {
	f := newFakeProm(t)
	f.set(kQuantile, one(math.NaN()))
	policy := testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(100 * ms) }),
		prior(300*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Minute, time.Hour))
	res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delay != 100*ms || res.Source != tailcutv1alpha1.DelaySourceLastKnown {
		t.Errorf("got %s from %s, want the last good delay clamped to max 100ms", res.Delay, res.Source)
	}
}

// TestStability covers clamping, the deadband, the step limit and one change
// per evaluation interval, with injected time only.
func TestStability(t *testing.T) {
	fast := bimodal(15, 0.03) // target ~17.7ms
	cases := []struct {
		name   string
		F      func(float64) float64
		policy []func(*tailcutv1alpha1.HedgePolicy)
		want   time.Duration
		// wantTarget, when set, is checked against Result.Target.
		wantTarget time.Duration
	}{
		{name: "first derivation jumps to the target", F: fast, want: fastTarget},
		{name: "clamped to min", F: bimodal(1, 0), policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.Min = dur(8 * ms) })}, want: 8 * ms},
		{name: "clamped to max", F: lognormal(400, 0.5), policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(100 * ms) })}, want: 100 * ms},
		{name: "within the deadband: held", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(17*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want:   17 * ms, wantTarget: fastTarget},
		{name: "no deadband: follows", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.DeadbandPercent = 0 }),
			prior(17*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want: fastTarget},
		{name: "step limit up", F: lognormal(20, 0.5),
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(10*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want:   15 * ms},
		{name: "step limit down", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want:   50 * ms},
		{name: "step limit 20%", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.MaxStepPercent = 20 }),
			prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want: 80 * ms},
		{name: "one change per interval: too soon", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 29*time.Second)},
			want:   100 * ms, wantTarget: fastTarget},
		{name: "one change per interval: interval passed", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 30*time.Second)},
			want:   50 * ms},
		{name: "out of bounds delay in force is clamped even too soon", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(60 * ms) }),
			prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Second)},
			want: 60 * ms},
		{name: "moves from the fallback delay gradually", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			fallbackStatic(200 * ms), prior(200*ms, tailcutv1alpha1.DelaySourceFallback, time.Hour, time.Hour)},
			want: 100 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.world(5000, tc.F)
			policy := testPolicy(tc.policy...)
			res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, policy, res)
			if !res.Derived || res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.DerivedReason != tailcutv1alpha1.ReasonDerived {
				t.Errorf("got %s %v %s, want a derived Prometheus delay (%s)", res.Source, res.Derived, res.DerivedReason, res.Reason)
			}
			if res.Delay != tc.want {
				t.Errorf("delay %s, want %s (%s)", res.Delay, tc.want, res.Reason)
			}
			if tc.wantTarget != 0 && res.Target != tc.wantTarget {
				t.Errorf("target %s, want %s", res.Target, tc.wantTarget)
			}
			if res.Quantile == nil || !res.Quantile.SampledAt.Time.Equal(now) || res.Quantile.Samples != 5000 || res.Quantile.Quantile != 0.95 {
				t.Errorf("quantile observation %+v, want one sampled now over 5000 samples", res.Quantile)
			}
		})
	}
}

// TestStep is the quantile on a step: fast 15ms requests and about 5% of them
// 100ms slower. Whichever side of 5% the window falls, the delay must sit just
// above the fast mode, never at the slow mode.
func TestStep(t *testing.T) {
	for _, slow := range []float64{0.045, 0.048, 0.05, 0.052, 0.055, 0.06} {
		F := bimodal(15, slow)
		f := newFakeProm(t)
		f.world(5000, F)
		policy := testPolicy()
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, policy, res)
		raw := histogramQuantile(5000, F, 0.95)
		extra := 1 - F(res.Delay.Seconds()*1000)
		t.Logf("slow %.1f%%: raw p95 %s, delay %s, extra load %.2f%%", 100*slow, round(raw), res.Delay, 100*extra)
		if res.Delay <= 15*ms || res.Delay > 20*ms {
			t.Errorf("slow %.1f%%: delay %s, want just above the 15ms fast mode (%s)", 100*slow, res.Delay, res.Reason)
		}
		if extra > (1+stepTolerance)*0.05 {
			t.Errorf("slow %.1f%%: extra load %.2f%% above the budget allowance", 100*slow, 100*extra)
		}
	}
	// With more slow requests than the budget, no delay below the slow mode fits:
	// the delay stays at the budget quantile.
	F := bimodal(15, 0.10)
	f := newFakeProm(t)
	f.world(5000, F)
	res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), testPolicy(), now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delay < 100*ms {
		t.Errorf("10%% slow, 5%% budget: delay %s would send 10%% extra requests", res.Delay)
	}
}

// TestBudgetQuantile: the delay never targets a lower quantile than the budget
// allows, and follows a higher configured one.
func TestBudgetQuantile(t *testing.T) {
	F := lognormal(20, 0.5)
	for _, tc := range []struct {
		q      float64
		budget int32
		wantQ  float64
	}{{0.9, 5, 0.95}, {0.99, 5, 0.99}, {0.9, 10, 0.9}, {0.95, 2, 0.98}} {
		f := newFakeProm(t)
		f.world(20000, F)
		policy := testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Quantile = tc.q }),
			func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Budget.MaxExtraLoadPercent = tc.budget })
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		want := round(histogramQuantile(20000, F, tc.wantQ))
		if diff := res.Delay - want; diff > 200*time.Microsecond || diff < -200*time.Microsecond {
			t.Errorf("q %.2f budget %d%%: delay %s, want the p%.0f %s", tc.q, tc.budget, res.Delay, 100*tc.wantQ, want)
		}
	}
}

func TestBudgetExceeded(t *testing.T) {
	F := bimodal(15, 0.03)
	t.Run("raises the delay", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 800) // 8% > 5% * 1.25
		policy := testPolicy(prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, policy, res)
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded || res.Delay != 30*ms || !res.Derived {
			t.Errorf("got %s (%s), want 30ms BudgetExceeded (%s)", res.Delay, res.DerivedReason, res.Reason)
		}
		if res.HedgeRate == nil || res.HedgeRate.Percent != 8 || res.HedgeRate.BudgetPercent != 5 || !res.HedgeRate.SampledAt.Time.Equal(now) {
			t.Errorf("hedge rate %+v, want 8%% of 5%% now", res.HedgeRate)
		}
	})
	t.Run("waits for a window at the current delay", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 800)
		// The histogram alone asks for ~17.8ms, outside the deadband of 20ms.
		policy := testPolicy(prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.DerivedReason != tailcutv1alpha1.ReasonDerived || !strings.Contains(res.Reason, "waiting") || res.Delay != 20*ms {
			t.Errorf("got %s (%s: %s), want 20ms: no raise before a full window at 20ms, and no lowering", res.Delay, res.DerivedReason, res.Reason)
		}
	})
	t.Run("within the allowance", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 600) // 6% <= 6.25%
		policy := testPolicy(prior(18*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.DerivedReason != tailcutv1alpha1.ReasonDerived || res.Delay != 18*ms {
			t.Errorf("got %s (%s), want 18ms held, Derived", res.Delay, res.DerivedReason)
		}
	})
	t.Run("pauses at max", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 2000)
		policy := testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(50 * ms) }),
			prior(50*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, policy, res)
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded {
			t.Errorf("got %s from %s (%s), want hedging paused for BudgetExceeded", res.Delay, res.Source, res.DerivedReason)
		}
	})
}

func TestHedgingHurts(t *testing.T) {
	before := bimodal(15, 0.03)
	after := bimodal(30, 0.03) // the unhedged median doubled
	setup := func(t *testing.T) *fakeProm {
		f := newFakeProm(t)
		f.world(5000, after)
		f.set(kPrev, bucketsReply(5000, before))
		f.hedging(10000, 400) // 4%: hedges are a real share of the traffic
		return f
	}
	t.Run("pauses", func(t *testing.T) {
		f := setup(t)
		policy := testPolicy(prior(18*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, policy, res)
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts {
			t.Fatalf("got %s from %s (%s: %s), want hedging paused, HedgingHurts", res.Delay, res.Source, res.DerivedReason, res.Reason)
		}
		if res.Quantile == nil || res.HedgeRate == nil {
			t.Errorf("the readings behind the pause are missing")
		}
	})
	t.Run("few hedges: no pause", func(t *testing.T) {
		f := setup(t)
		f.hedging(10000, 100) // 1% < half the budget
		policy := testPolicy(prior(18*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("got %s from %s (%s), want hedging to go on", res.Delay, res.Source, res.Reason)
		}
		for _, q := range f.queries() {
			if kindOf(q) == kPrev {
				t.Errorf("the previous window was read although the hedge rate is low")
			}
		}
	})
	t.Run("stable median: no pause", func(t *testing.T) {
		f := setup(t)
		f.set(kPrev, bucketsReply(5000, after))
		policy := testPolicy(prior(33*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("got %s from %s (%s), want hedging to go on", res.Delay, res.Source, res.Reason)
		}
	})
	paused := []func(*tailcutv1alpha1.HedgePolicy){
		prior(0, tailcutv1alpha1.DelaySourceNone, 30*time.Second, time.Minute), derivedCondition(tailcutv1alpha1.ReasonHedgingHurts)}
	t.Run("pause holds although the data recovered", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		policy := testPolicy(paused...)
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts {
			t.Errorf("got %s from %s (%s), want the pause to hold for max(window, 2 intervals)", res.Delay, res.Source, res.Reason)
		}
	})
	t.Run("pause holds through a metrics outage", func(t *testing.T) {
		f := newFakeProm(t)
		f.set(kQuantile, reply{code: 500})
		policy := testPolicy(append([]func(*tailcutv1alpha1.HedgePolicy){fallbackStatic(40 * ms)}, paused...)...)
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourceNone {
			t.Errorf("got %s from %s, want the pause to hold, not the fallback", res.Delay, res.Source)
		}
	})
	t.Run("resumes after the hold", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		policy := testPolicy(prior(0, tailcutv1alpha1.DelaySourceNone, 30*time.Second, 2*time.Minute),
			derivedCondition(tailcutv1alpha1.ReasonHedgingHurts))
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.Delay != fastTarget {
			t.Errorf("got %s from %s (%s), want hedging to resume at the p95", res.Delay, res.Source, res.Reason)
		}
	})
	t.Run("a spec change lifts the pause", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		policy := testPolicy(paused...)
		policy.Generation = 2
		res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("got %s from %s (%s), want hedging to resume after a spec change", res.Delay, res.Source, res.Reason)
		}
	})
}

func TestInvalidQuery(t *testing.T) {
	custom := func(q string) func(*tailcutv1alpha1.HedgePolicy) {
		return auto(func(a *tailcutv1alpha1.AutoDelay) { a.Source = tailcutv1alpha1.EstimateSourceCustom; a.Query = q })
	}
	for _, tc := range []struct {
		name    string
		query   string
		problem string
	}{
		{"unknown variable", `histogram_quantile({{.Quantile}}, rate(x_bucket{svc="{{.Svc}}"}[{{.Window}}]))`, "the template does not render"},
		{"template syntax", `histogram_quantile({{.Quantile}, rate(x[5m]))`, "the template does not parse"},
		{"PromQL syntax", `histogram_quantile({{.Quantile}}, rate(x_bucket[{{.Window}}])`, "the query is not valid PromQL"},
		{"range vector", `x_bucket{namespace="{{.Namespace}}"}[{{.Window}}]`, "the query returns a range vector"},
		{"empty", `   `, "source Custom needs auto.query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			policy := testPolicy(custom(tc.query))
			before := counterValue(t, policyLabel(policy), tailcutv1alpha1.ReasonInvalidQuery)
			_, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
			var iq *InvalidQueryError
			if !errors.As(err, &iq) {
				t.Fatalf("error %v, want an *InvalidQueryError", err)
			}
			if !strings.HasPrefix(iq.Problem, tc.problem) || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("problem %q (%v), want %q", iq.Problem, err, tc.problem)
			}
			if len(f.queries()) != 0 {
				t.Errorf("an invalid query was sent: %q", f.queries())
			}
			if got := counterValue(t, policyLabel(policy), tailcutv1alpha1.ReasonInvalidQuery); got != before+1 {
				t.Errorf("InvalidQuery not counted")
			}
		})
	}
}

func TestCustomQuery(t *testing.T) {
	f := newFakeProm(t)
	f.set(kQuantile, reply{body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.042"]}}`})
	policy := testPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Source = tailcutv1alpha1.EstimateSourceCustom
		a.Query = `scalar(histogram_quantile({{.Quantile}}, sum by (le) (rate(rpc_seconds_bucket{ns="{{.Namespace}}",svc="{{.Service}}",port="{{.Port}}"}[{{.Window}}]))))`
	}))
	policy.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
	res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, policy, res)
	if res.Delay != 42*ms || res.Source != tailcutv1alpha1.DelaySourcePrometheus {
		t.Errorf("got %s from %s, want 42ms (%s)", res.Delay, res.Source, res.Reason)
	}
	want := `scalar(histogram_quantile(0.95, sum by (le) (rate(rpc_seconds_bucket{ns="shop",svc="cart",port="8080"}[2m]))))`
	if q := f.queries(); len(q) != 1 || q[0] != want {
		t.Errorf("queries %q, want only %q", q, want)
	}
}

func TestStaticPolicyNeedsNoQuery(t *testing.T) {
	f := newFakeProm(t)
	policy := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: dur(25 * ms)}
	})
	res, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delay != 25*ms || res.Source != tailcutv1alpha1.DelaySourceStatic || len(f.queries()) != 0 {
		t.Errorf("got %s from %s after %d queries, want static 25ms and no query", res.Delay, res.Source, len(f.queries()))
	}
}

func TestMetrics(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.03))
	f.hedging(10000, 300)
	policy := testPolicy(func(p *tailcutv1alpha1.HedgePolicy) { p.Name = "metrics" })
	if _, err := newTestEstimator(t, f, 0).Estimate(context.Background(), policy, now); err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := delaySeconds.WithLabelValues("shop/metrics").Write(&m); err != nil || math.Abs(m.GetGauge().GetValue()-fastTarget.Seconds()) > 1e-9 {
		t.Errorf("tailcut_hedge_delay_seconds = %v (%v), want %v", m.GetGauge().GetValue(), err, fastTarget.Seconds())
	}
	if err := hedgeRate.WithLabelValues("shop/metrics").Write(&m); err != nil || math.Abs(m.GetGauge().GetValue()-0.03) > 1e-9 {
		t.Errorf("tailcut_hedge_rate = %v (%v), want 0.03", m.GetGauge().GetValue(), err)
	}
	ForgetPolicy("shop", "metrics")
	for _, c := range []prometheus.Collector{delaySeconds, hedgeRate, estimateErrors} {
		if hasSeries(c, "shop/metrics") {
			t.Errorf("ForgetPolicy left a series behind")
		}
	}
}

func hasSeries(c prometheus.Collector, policy string) bool {
	ch := make(chan prometheus.Metric, 1000)
	go func() { c.Collect(ch); close(ch) }()
	found := false
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "policy" && l.GetValue() == policy {
				found = true
			}
		}
	}
	return found
}
