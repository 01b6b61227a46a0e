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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// The tests below run the estimator as production does: its sampler reads a
// fake Prometheus HTTP API (fake_prometheus_test.go), then Estimate decides
// from what it read. Their policies have queries of their own (ownPolicy);
// the batch reading of tailcut's Envoy clusters has its tests in
// sampler_test, proxies_test and closedloop_test. The expected delays are
// worked out by hand from the distribution and Envoy's bucket edges.

// now is the injected evaluation time of every fake-Prometheus test.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fastTarget is the delay for bimodal(15, 0.03) over 5000 requests: the tail
// allowed is 5.25% plus two standard errors, sqrt(0.0525*0.9475/5000) = 0.315
// points each: 5.88%. Bucket le=14 ends at 15ms, where 51.5% are slower;
// le=16 ends at 17ms, where 3% + 97% * (1 - Phi(2)) = 5.2% are: the p95
// reads 17ms. That is more than 90% of the budget's share (4.5%), and le=18
// ends at 19ms, where 3% + 97% * (1 - Phi(4)) = 3.0% are, within 1.5 x 17ms
// (headroom.go): 19ms, with no margin (the headroom point leaves the account
// its room already).
const fastTarget = 19 * time.Millisecond

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
		st.DelayReason = "the previous decision"
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

// ownPolicy is testPolicy published on an Istio mesh, where the sampler reads
// it with queries of its own: the hedged routes' Envoy histogram and counters.
func ownPolicy(muts ...func(*tailcutv1alpha1.HedgePolicy)) *tailcutv1alpha1.HedgePolicy {
	return testPolicy(append([]func(*tailcutv1alpha1.HedgePolicy){onMesh}, muts...)...)
}

func onMesh(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Publish.Target = tailcutv1alpha1.PublishIstio }

// sampleAndEstimate is one evaluation as production runs it: the sampler's
// tick at now, for the policy, then Estimate.
func sampleAndEstimate(est *Prometheus, policy *tailcutv1alpha1.HedgePolicy, now time.Time) (Result, error) {
	list := func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*policy}, nil
	}
	est.Sampler(list, nil, logr.Discard()).Tick(context.Background(), now)
	return est.Estimate(context.Background(), policy, now)
}

func newTestEstimator(t *testing.T, f *fakeProm, timeout time.Duration) *Prometheus {
	t.Helper()
	p, err := NewPrometheus(PrometheusOptions{Address: f.URL, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// world answers the histogram queries for n requests distributed by F.
func (f *fakeProm) world(n float64, F func(float64) float64) {
	f.set(kBuckets, bucketsReply(n, F))
}

// hedging answers the hedge counters: retries extra attempts per requests.
func (f *fakeProm) hedging(requests, retries float64) {
	f.set(kRetries, one(retries))
	f.set(kAttempts, one(requests+retries))
}

func counterValue(t *testing.T, policy *tailcutv1alpha1.HedgePolicy, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := estimateErrors.WithLabelValues(append(PolicyLabels(policy.Namespace, policy.Name), reason)...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func estimate(t *testing.T, f *fakeProm, policy *tailcutv1alpha1.HedgePolicy) Result {
	t.Helper()
	res, err := sampleAndEstimate(newTestEstimator(t, f, 0), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, policy, res)
	return res
}

// TestNoData covers every case in which no trustworthy delay can be read: each
// has its reason, keeps a fresh last good delay, and otherwise falls back.
func TestNoData(t *testing.T) {
	custom := auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Source = tailcutv1alpha1.EstimateSourceCustom
		a.Query = `histogram_quantile({{.Quantile}}, sum by (le) (rate(x_bucket{namespace="{{.Namespace}}"}[{{.Window}}])))`
	})
	cases := []struct {
		name   string
		policy []func(*tailcutv1alpha1.HedgePolicy)
		setup  func(f *fakeProm)
		reason string
		// timeout is the per-query timeout; zero means the 5s default.
		timeout time.Duration
	}{
		{name: "no histogram series", setup: func(f *fakeProm) { f.set(kBuckets, reply{Body: vectorJSON()}) }, reason: tailcutv1alpha1.ReasonNoData},
		{name: "no requests", setup: func(f *fakeProm) { f.set(kBuckets, bucketsReply(0, bimodal(15, 0.03))) }, reason: tailcutv1alpha1.ReasonNoTraffic},
		{name: "too few samples", setup: func(f *fakeProm) { f.world(99, bimodal(15, 0.03)) }, reason: tailcutv1alpha1.ReasonTooFewSamples},
		{name: "slower than the last bucket", setup: func(f *fakeProm) { f.world(5000, lognormal(20000, 0.1)) }, reason: tailcutv1alpha1.ReasonQuantileInfinite},
		{name: "histogram without +Inf", setup: func(f *fakeProm) {
			f.set(kBuckets, reply{Body: vectorJSON(sample{Labels: map[string]string{"le": "10"}, Value: 5})})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "custom: NaN", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) { f.set(kQuantile, one(math.NaN())) }, reason: tailcutv1alpha1.ReasonQuantileNaN},
		{name: "custom: empty", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) { f.set(kQuantile, reply{Body: vectorJSON()}) }, reason: tailcutv1alpha1.ReasonNoData},
		{name: "custom: several series", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) {
			f.set(kQuantile, reply{Body: vectorJSON(sample{Labels: map[string]string{"pod": "a"}, Value: 0.02}, sample{Labels: map[string]string{"pod": "b"}, Value: 0.03})})
		}, reason: tailcutv1alpha1.ReasonMultipleSeries},
		{name: "custom: +Inf", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) { f.set(kQuantile, one(math.Inf(1))) }, reason: tailcutv1alpha1.ReasonQuantileInfinite},
		{name: "custom: negative", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) { f.set(kQuantile, one(-0.01)) }, reason: tailcutv1alpha1.ReasonQuantileNegative},
		{name: "custom: above 10x max", policy: []func(*tailcutv1alpha1.HedgePolicy){custom}, setup: func(f *fakeProm) { f.set(kQuantile, one(10.5)) }, reason: tailcutv1alpha1.ReasonQuantileAbsurd},
		{name: "custom: above 60s", policy: []func(*tailcutv1alpha1.HedgePolicy){custom, auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(10 * time.Second) })},
			setup: func(f *fakeProm) { f.set(kQuantile, one(61)) }, reason: tailcutv1alpha1.ReasonQuantileAbsurd},
		{name: "timeout", setup: func(f *fakeProm) { f.set(kBuckets, reply{Hang: true}) }, reason: tailcutv1alpha1.ReasonQueryTimeout, timeout: 300 * ms},
		{name: "HTTP 500", setup: func(f *fakeProm) { f.set(kBuckets, reply{Code: 500, Body: "internal error"}) }, reason: tailcutv1alpha1.ReasonPrometheusHTTPError},
		{name: "bad JSON", setup: func(f *fakeProm) {
			f.set(kBuckets, reply{Body: `{"status":"success","data":{"resultType":"vector","result":[{`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "malformed data", setup: func(f *fakeProm) {
			f.set(kBuckets, reply{Body: `{"status":"success","data":{"resultType":"vector","result":"oops"}}`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "string result", setup: func(f *fakeProm) {
			f.set(kBuckets, reply{Body: `{"status":"success","data":{"resultType":"string","result":[1700000000,"x"]}}`})
		}, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "not JSON", setup: func(f *fakeProm) { f.set(kBuckets, reply{Body: `<html>proxy error</html>`}) }, reason: tailcutv1alpha1.ReasonBadResponse},
		{name: "query rejected", setup: func(f *fakeProm) {
			f.set(kBuckets, reply{Code: 422, Body: `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`})
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
					f.world(5000, bimodal(15, 0.03))
					tc.setup(f)
					policy := ownPolicy(append(append([]func(*tailcutv1alpha1.HedgePolicy){}, tc.policy...), pr.policy...)...)
					est := newTestEstimator(t, f, tc.timeout)
					before := counterValue(t, policy, tc.reason)
					res, err := sampleAndEstimate(est, policy, now)
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
					if got := counterValue(t, policy, tc.reason); got != before+1 {
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
	policy := ownPolicy(prior(20*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Minute, time.Hour))
	res, err := sampleAndEstimate(est, policy, now)
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
	f.set(kBuckets, reply{Code: 500})
	policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(100 * ms) }),
		prior(300*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Minute, time.Hour))
	res := estimate(t, f, policy)
	if res.Delay != 100*ms || res.Source != tailcutv1alpha1.DelaySourceLastKnown {
		t.Errorf("got %s from %s, want the last good delay clamped to max 100ms", res.Delay, res.Source)
	}
}

// TestStability covers clamping, the deadband and the step limit.
func TestStability(t *testing.T) {
	fast := bimodal(15, 0.03)
	cases := []struct {
		name   string
		F      func(float64) float64
		policy []func(*tailcutv1alpha1.HedgePolicy)
		want   time.Duration
	}{
		{name: "first derivation jumps to the target", F: fast, want: fastTarget},
		// Fast mode N(1ms, 1ms): le=2 ends at 3ms, Phi(2) = 97.7% faster: 3.3ms.
		{name: "clamped to min", F: bimodal(1, 0), policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.Min = dur(8 * ms) })}, want: 8 * ms},
		// Lognormal(400ms, 0.5): the p95 is about 900ms, under 10 x max.
		{name: "clamped to max", F: lognormal(400, 0.5), policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(200 * ms) })}, want: 200 * ms},
		{name: "within the deadband: held", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(19500*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want:   19500 * time.Microsecond},
		{name: "no deadband: follows", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.DeadbandPercent = 0 }),
			prior(18*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want: fastTarget},
		{name: "step limit down", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want:   50 * ms},
		{name: "step limit 20%", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			auto(func(a *tailcutv1alpha1.AutoDelay) { a.MaxStepPercent = 20 }),
			prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour)},
			want: 80 * ms},
		{name: "one interval after a change", F: fast,
			policy: []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 30*time.Second)},
			want:   50 * ms},
		{name: "moves from the fallback delay gradually", F: fast, policy: []func(*tailcutv1alpha1.HedgePolicy){
			fallbackStatic(200 * ms), prior(200*ms, tailcutv1alpha1.DelaySourceFallback, time.Hour, time.Hour)},
			want: 100 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.world(5000, tc.F)
			policy := ownPolicy(tc.policy...)
			res := estimate(t, f, policy)
			if !res.Derived || res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.DerivedReason != tailcutv1alpha1.ReasonDerived {
				t.Errorf("got %s %v %s, want a derived Prometheus delay (%s)", res.Source, res.Derived, res.DerivedReason, res.Reason)
			}
			if res.Delay != tc.want {
				t.Errorf("delay %s, want %s (%s)", res.Delay, tc.want, res.Reason)
			}
			if res.Quantile == nil || !res.Quantile.SampledAt.Time.Equal(now) || res.Quantile.Samples != 5000 || res.Quantile.Quantile != 0.95 {
				t.Errorf("quantile observation %+v, want one sampled now over 5000 samples", res.Quantile)
			}
		})
	}
}

// TestHoldAfterAChange: within an evaluation interval of a change nothing at
// the new delay can be read yet, so the decision in status stands, clamped to
// a changed spec, and no query is sent.
func TestHoldAfterAChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy []func(*tailcutv1alpha1.HedgePolicy)
		want   time.Duration
	}{
		// 27s of a 30s interval: more than the sampler's slack (2.5s, a
		// quarter of its 10s tick) short of it.
		{"too soon", []func(*tailcutv1alpha1.HedgePolicy){prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 27*time.Second, 27*time.Second)}, 100 * ms},
		{"clamped to a new max", []func(*tailcutv1alpha1.HedgePolicy){auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(60 * ms) }),
			prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, time.Second, time.Second)}, 60 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.world(5000, bimodal(15, 0.03))
			policy := ownPolicy(append(tc.policy, derivedCondition(tailcutv1alpha1.ReasonDerived))...)
			res := estimate(t, f, policy)
			if res.Delay != tc.want || res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.Reason != "the previous decision" || !res.Derived {
				t.Errorf("got %s from %s (%v: %s), want the decision in status, %s", res.Delay, res.Source, res.Derived, res.Reason, tc.want)
			}
			if q := f.queries(); len(q) != 0 {
				t.Errorf("queries sent during the hold: %q", q)
			}
		})
	}
}

// TestAnIntervalLessTheSlackReads: the sampler makes a policy due a quarter
// tick before its interval ends (timer jitter), and the decision that changed
// the delay ran a little after its own tick; an evaluation an interval after
// that tick, a few milliseconds short of an interval after the decision,
// reads, and moves the delay. Held, it waited a tick more: in the local e2e
// the delay reached a shifted fast mode 13.05 s after the shift, against 2
// intervals and a scrape.
func TestAnIntervalLessTheSlackReads(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.03))
	policy := ownPolicy(prior(100*ms, tailcutv1alpha1.DelaySourcePrometheus, 29900*time.Millisecond, 29900*time.Millisecond),
		derivedCondition(tailcutv1alpha1.ReasonDerived))
	res := estimate(t, f, policy)
	if res.Delay >= 100*ms || len(f.queries()) == 0 {
		t.Errorf("got %s after %d queries (%s), want a reading and the delay moving down from 100ms", res.Delay, len(f.queries()), res.Reason)
	}
}

// TestThinReadingKeepsTheFallback: the counters saw requests but Envoy has
// not published its histogram yet (Prometheus just started scraping the
// proxy). With the fallback in force, the fallback stays, not derived;
// with a delay derived before, the delay is held and still derived.
func TestThinReadingKeepsTheFallback(t *testing.T) {
	for _, tc := range []struct {
		name        string
		source      tailcutv1alpha1.DelaySource
		wantSource  tailcutv1alpha1.DelaySource
		wantDerived bool
	}{
		{"fallback in force", tailcutv1alpha1.DelaySourceFallback, tailcutv1alpha1.DelaySourceFallback, false},
		{"derived before", tailcutv1alpha1.DelaySourcePrometheus, tailcutv1alpha1.DelaySourcePrometheus, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.set(kBuckets, bucketsReply(0, bimodal(15, 0.03)))
			f.hedging(8920, 0)
			policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
				a.Fallback = &tailcutv1alpha1.Fallback{Action: tailcutv1alpha1.FallbackStatic, Delay: dur(50 * ms)}
			}), prior(50*ms, tc.source, time.Minute, time.Minute))
			res := estimate(t, f, policy)
			if res.Delay != 50*ms || res.Source != tc.wantSource || res.Derived != tc.wantDerived {
				t.Errorf("got %s from %s (derived %v: %s), want 50ms from %s (derived %v)", res.Delay, res.Source, res.Derived, res.Reason, tc.wantSource, tc.wantDerived)
			}
			if !strings.Contains(res.Reason, "histogram shows no request") {
				t.Errorf("reason %q does not say the histogram is not published yet", res.Reason)
			}
		})
	}
}

// TestReadsSinceTheLastChange: the span starts at the last change (less a
// second for the push to reach Envoy) while that is shorter than the window.
func TestReadsSinceTheLastChange(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.03))
	f.hedging(5000, 250)
	res := estimate(t, f, ownPolicy(prior(fastTarget, tailcutv1alpha1.DelaySourcePrometheus, 45*time.Second, 45*time.Second)))
	for _, q := range f.queries() {
		if kindOf(q) != kPrev && !strings.Contains(q, "[44s]") && !strings.Contains(q, "[30s]") {
			t.Errorf("query does not read the 44s since the change: %s", q)
		}
	}
	if h := res.HedgeRate; h == nil || h.Since == nil || !h.Since.Time.Equal(now.Add(-44*time.Second)) || h.Delay == nil || h.Delay.Duration != fastTarget || h.Requests != 5000 {
		t.Errorf("hedge rate %+v, want 5%% at %s over 5000 requests since %s", h, fastTarget, now.Add(-44*time.Second))
	}
}

// TestStep is the quantile on a step: 15ms requests and about 5% of them 100ms
// slower, under a 5% budget. Up to 5.88% slow (5.25% plus two standard errors
// of 0.315 points at 5000 requests) the delay sits just above the fast mode:
// le=18 ends at 19ms, where only the slow share is left (and 96% x (1 -
// Phi(4)) = 0.003% of the fast mode). At 4% that is the headroom (4.00%
// past 19ms, within 4.5%); from 4.8% it is the knee (the share past 19ms is
// the slow share past 1.5 x 19ms plus 0.003%, within a tenth of the budget's
// share); neither adds the margin. Beyond 5.88%, no delay below the slow mode
// fits the budget, and the delay goes past it.
func TestStep(t *testing.T) {
	for _, slow := range []float64{0.04, 0.048, 0.05, 0.052, 0.055, 0.058} {
		f := newFakeProm(t)
		f.world(5000, bimodal(15, slow))
		res := estimate(t, f, ownPolicy())
		if res.Delay != 19*ms {
			t.Errorf("slow %.1f%%: delay %s, want just above the 15ms fast mode (%s)", 100*slow, res.Delay, res.Reason)
		}
	}
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.06))
	if res := estimate(t, f, ownPolicy()); res.Delay < 115*ms {
		t.Errorf("6%% slow, 5%% budget: delay %s would send 6%% extra requests", res.Delay)
	}
}

// TestKnee: a fast mode with stragglers beside a slow mode as large as the
// budget. 93.2% N(15, 1), 2% stragglers N(19, 1.2) and 4.8% slow N(115, 1),
// by hand with bucket le=b holding round(5000 F(b+1ms)): le=18 leaves 4.8% +
// 2% * (1 - Phi(0)) + 0.003% = 5.80% slower than 19ms, within the 5.88%
// allowed: the p95 reads 19ms, where 1% of requests are stragglers that
// would take the slow requests' hedges. No delay below the slow mode has at
// most 4.5% past it (no headroom), and 4.80% are slower than 29ms (le=28,
// past 1.5 x 19ms): a slow mode as large as the budget. le=20 leaves 4.8% +
// 2% * (1 - Phi(1.67)) = 4.90% slower than 21ms, within 4.80% + a tenth of
// the budget's share: the knee, 21ms, with 0.10% of stragglers past it.
func TestKnee(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, func(ms float64) float64 {
		return 0.932*normalCDF(ms, 15, 1) + 0.02*normalCDF(ms, 19, 1.2) + 0.048*normalCDF(ms, 115, 1)
	})
	res := estimate(t, f, ownPolicy())
	if res.Delay != 21*ms {
		t.Errorf("delay %s, want 21ms (%s)", res.Delay, res.Reason)
	}
	if !strings.Contains(res.Reason, "0.10% more than the slow mode took longer than 21ms") {
		t.Errorf("reason %q, want it to say where the stragglers end", res.Reason)
	}
	if q := res.Quantile; q == nil || q.Value.Duration != 19*ms || q.LowerBound {
		t.Errorf("quantile %+v, want the p95 as read, 19ms", q)
	}
	// A smooth tail has no slow mode, so no knee. Lognormal(20ms, 0.5):
	// 1 - Phi(ln(46/20)/0.5) = 4.79% of requests are slower than 46ms (the
	// p95 read; 7.55% past 41ms is over the 5.88%), and 1 - Phi(ln(51/20)/0.5)
	// = 3.06% slower than 51ms, within 4.5%: the headroom, 51ms.
	f = newFakeProm(t)
	f.world(5000, lognormal(20, 0.5))
	if res := estimate(t, f, ownPolicy()); strings.Contains(res.Reason, "stragglers end") || res.Delay != 51*ms {
		t.Errorf("lognormal: %s (%s), want the headroom 51ms, no knee", res.Delay, res.Reason)
	}
}

// TestHeadroom: stragglers just past the quantile read would have the delay
// ask the hedge account for more than it gives (4.96% of a 5% budget over
// 30 s), and it would ration the slow requests' hedges. 94.8% N(15, 1), 1.2%
// stragglers N(22, 0.3) and 4% slow N(115, 1), by hand with bucket le=b
// holding round(5000 F(b+1ms)): le=18 leaves 4% + 1.2% + 94.8% * (1 -
// Phi(4)) = 5.20% slower than 19ms, within the 5.88% allowed: the p95 reads
// 19ms, whose 20.9ms would have 5.2% past it. le=20 leaves 5.20% too; le=22
// leaves 4% + 1.2% * (1 - Phi(3.33)) = 4.00% slower than 23ms, within 90% of
// the budget's share (4.5%) and 1.5 x 19ms: 23ms, with no margin. 5% slow
// (TestStep) has no such delay below its slow mode and stays at 20.9ms.
func TestHeadroom(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, func(ms float64) float64 {
		return 0.948*normalCDF(ms, 15, 1) + 0.012*normalCDF(ms, 22, 0.3) + 0.04*normalCDF(ms, 115, 1)
	})
	res := estimate(t, f, ownPolicy())
	if res.Delay != 23*ms {
		t.Errorf("delay %s, want 23ms (%s)", res.Delay, res.Reason)
	}
	if q := res.Quantile; q == nil || q.Value.Duration != 19*ms || q.LowerBound {
		t.Errorf("quantile %+v, want the p95 as read, 19ms", q)
	}
	want := "5.20% of 5000 requests over 2m took longer than 19ms (p95); 4.00% took longer than 23ms, at most 90% of the budget's share: read there"
	if !strings.Contains(res.Reason, want) {
		t.Errorf("reason %q does not say %q", res.Reason, want)
	}
}

// TestBudgetQuantile: the delay never targets a lower quantile than the budget
// allows, and follows a higher configured one. Lognormal(20ms, 0.5): the
// delay sits at the quantile 1 - 1.1*tau or just above, within two buckets.
func TestBudgetQuantile(t *testing.T) {
	F := lognormal(20, 0.5)
	for _, tc := range []struct {
		q      float64
		budget int32
		wantQ  float64
	}{{0.9, 5, 0.95}, {0.99, 5, 0.99}, {0.9, 10, 0.9}, {0.95, 2, 0.98}} {
		f := newFakeProm(t)
		f.world(20000, F)
		policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Quantile = tc.q }),
			func(p *tailcutv1alpha1.HedgePolicy) { p.Spec.Budget.MaxExtraLoadPercent = tc.budget })
		res := estimate(t, f, policy)
		if res.Quantile == nil || math.Abs(res.Quantile.Quantile-tc.wantQ) > 1e-9 {
			t.Fatalf("q %.2f budget %d%%: read %+v, want quantile %.2f", tc.q, tc.budget, res.Quantile, tc.wantQ)
		}
		lo := quantileOf(F, 1-(1-tc.wantQ)*(1+budgetSlack)-0.005)
		hi := quantileOf(F, tc.wantQ) * (1 + delayMargin) * 1.15
		if d := float64(res.Delay) / float64(ms); d < lo || d > hi {
			t.Errorf("q %.2f budget %d%%: delay %s, want in [%.1f, %.1f]ms", tc.q, tc.budget, res.Delay, lo, hi)
		}
	}
}

// TestBudgetGuard: over the budget the next evaluation raises the delay and
// records the floor; the floor keeps later targets above it for a window.
func TestBudgetGuard(t *testing.T) {
	F := bimodal(15, 0.03)
	t.Run("raises the delay at once", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 3000) // 30% at 16ms
		res := estimate(t, f, ownPolicy(prior(16*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		// By maxStepPercent: 24ms; the hedged histogram only proves 17ms.
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded || res.Delay != 24*ms || !res.Derived {
			t.Errorf("got %s (%s), want 24ms BudgetExceeded (%s)", res.Delay, res.DerivedReason, res.Reason)
		}
		if fl := res.Floor; fl == nil || fl.Delay.Duration != 16*ms || fl.Percent != 30 || !fl.MeasuredAt.Time.Equal(now) {
			t.Errorf("floor %+v, want 16ms at 30%% now", fl)
		}
		if h := res.HedgeRate; h == nil || h.Percent != 30 || h.BudgetPercent != 5 || !h.SampledAt.Time.Equal(now) {
			t.Errorf("hedge rate %+v, want 30%% of 5%% now", h)
		}
	})
	t.Run("to the lower bound when that is further", func(t *testing.T) {
		// The fast mode moved to 40ms: the hedged histogram shows it.
		f := newFakeProm(t)
		f.world(5000, bimodal(40, 0.03))
		f.hedging(10000, 9000)
		res := estimate(t, f, ownPolicy(prior(16*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		// le=40 ends at 41ms, where only 3% + 97% * (1 - Phi(1)) = 18% are slower;
		// le=45 ends at 46ms: 3%. 46ms + 10% = 50.6ms.
		if res.Delay != 50600*time.Microsecond {
			t.Errorf("got %s, want 50.6ms (%s)", res.Delay, res.Reason)
		}
	})
	t.Run("above the budget within its noise: up through the deadband", func(t *testing.T) {
		// The fast target is within the 10% deadband above 17.5ms.
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 565) // 5.65%: above 5%, not significantly
		policy := ownPolicy(prior(17500*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
		if res := estimate(t, f, policy); res.Delay != fastTarget || res.DerivedReason != tailcutv1alpha1.ReasonDerived {
			t.Errorf("5.65%% hedged at 17.5ms: %s %s, want %s (%s)", res.Delay, res.DerivedReason, fastTarget, res.Reason)
		}
		f.hedging(10000, 450) // 4.5%: within the budget, the deadband holds
		if res := estimate(t, f, policy); res.Delay != 17500*time.Microsecond {
			t.Errorf("4.5%% hedged at 17.5ms: %s, want 17.5ms held (%s)", res.Delay, res.Reason)
		}
	})
	t.Run("the histogram proves it when the hedge account holds the counters", func(t *testing.T) {
		// The fast mode moved from 15 to 40ms (the local e2e's shift). Envoy's
		// hedge account kept the hedges to 4.7%, but every request ran past
		// the 18.7ms delay: le=18 ends at 19ms and none of N(40, 1) is faster.
		// Raised at once to the lower bound, le=45's 46ms + 10% = 50.6ms,
		// as if the counters had seen it all.
		f := newFakeProm(t)
		f.world(5000, bimodal(40, 0.03))
		f.hedging(10000, 470)
		res := estimate(t, f, ownPolicy(prior(18700*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded || res.Delay != 50600*time.Microsecond {
			t.Errorf("got %s (%s), want 50.6ms BudgetExceeded (%s)", res.Delay, res.DerivedReason, res.Reason)
		}
		if fl := res.Floor; fl == nil || fl.Delay.Duration != 18700*time.Microsecond || fl.Percent != 100 {
			t.Errorf("floor %+v, want 18.7ms at 100%%", fl)
		}
		if h := res.HedgeRate; h == nil || h.Percent != 4.7 {
			t.Errorf("hedge rate %+v, want the counted 4.7%%", h)
		}
		if !strings.Contains(res.Reason, "100.00% of 5000 requests ran past the delay") {
			t.Errorf("reason %q does not say how many requests ran past the delay", res.Reason)
		}
	})
	// 5% slow, fast N(15, 1): le=16 holds the requests under 17ms,
	// 95% * Phi(2) = 92.84%, le=18 those under 19ms, 95% * Phi(4) = 94.997%.
	// The counters, held by the hedge account, say 4.8% either way.
	t.Run("over the budget by the histogram while the account holds the counters", func(t *testing.T) {
		// At 17ms, 7.16% ran past the delay: over 5.25% by more than two
		// standard errors (0.32 points over 5000). The counters are within
		// the budget (the account held them), so the delay goes to what the
		// hedged histogram proves, le=18's 19ms + 10% = 20.9ms, more than
		// the deadband (18.7ms), not the step limit (25.5ms); a floor at
		// 17ms and 7.16%.
		f := newFakeProm(t)
		f.world(5000, bimodal(15, 0.05))
		f.hedging(10000, 480)
		res := estimate(t, f, ownPolicy(prior(17*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded || res.Delay != 20900*time.Microsecond {
			t.Errorf("got %s (%s), want 20.9ms BudgetExceeded (%s)", res.Delay, res.DerivedReason, res.Reason)
		}
		if fl := res.Floor; fl == nil || fl.Delay.Duration != 17*ms || fl.Percent != 7.16 {
			t.Errorf("floor %+v, want 17ms at 7.16%%", fl)
		}
	})
	t.Run("over the budget among the hedges' answers: by the deadband", func(t *testing.T) {
		// What the local e2e read at 18.7ms (and went to 37.4ms on, its late
		// hedges then at 56ms: hedged p99 73.6 against 116.2ms): 93.5% fast
		// N(15, 1), 0.5% stragglers N(24, 1), and 6% slow requests answered
		// by their hedges, N(34, 1). By hand, with bucket le=b holding
		// round(5000 F(b+1ms)): le=10 holds 0 and le=12 106 (2.1%), so the
		// fastest answer is 10ms and the hedges' answers begin at 28.7ms;
		// le=28 holds 4700, so 6.0% took longer, within twice the budget.
		// The quantile reads le=33's 34ms (3.0% slower; le=30 leaves 6.0%,
		// over the 5.88% allowed), among the hedges' answers. At 18.7ms
		// (le=18, 4675) 6.5% ran past the delay: over the budget by the
		// histogram, the counters (4.9%) within it. Up by the deadband,
		// 18.7ms + 10% = 20.6ms, not to 34ms + 10% = 37.4ms.
		f := newFakeProm(t)
		f.world(5000, func(ms float64) float64 {
			return 0.935*normalCDF(ms, 15, 1) + 0.005*normalCDF(ms, 24, 1) + 0.06*normalCDF(ms, 34, 1)
		})
		f.hedging(10000, 490)
		res := estimate(t, f, ownPolicy(prior(18700*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded || res.Delay != 20600*time.Microsecond {
			t.Errorf("got %s (%s), want 20.6ms BudgetExceeded (%s)", res.Delay, res.DerivedReason, res.Reason)
		}
		if fl := res.Floor; fl == nil || fl.Delay.Duration != 18700*time.Microsecond || fl.Percent != 6.5 {
			t.Errorf("floor %+v, want 18.7ms at 6.5%%", fl)
		}
		if !strings.Contains(res.Reason, "6.00% of requests took longer than 28.7ms, where the hedges' answers begin") {
			t.Errorf("reason %q does not say why the delay did not go to the lower bound", res.Reason)
		}
	})
	t.Run("within the budget by the histogram", func(t *testing.T) {
		// At 18.7ms the histogram proves 5.003% slower (past 19ms): within
		// the noise of 5.25%. The quantile reads 19ms, within the deadband:
		// 18.7ms held.
		f := newFakeProm(t)
		f.world(5000, bimodal(15, 0.05))
		f.hedging(10000, 480)
		res := estimate(t, f, ownPolicy(prior(18700*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonDerived || res.Delay != 18700*time.Microsecond || res.Floor != nil {
			t.Errorf("got %s (%s), floor %+v, want 18.7ms held, Derived, no floor (%s)", res.Delay, res.DerivedReason, res.Floor, res.Reason)
		}
	})
	t.Run("within the budget and its noise", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		// Over 10000 requests the limit 5.25% has a standard error of 0.223
		// points: over means above 5.70%.
		f.hedging(10000, 575)
		res := estimate(t, f, ownPolicy(prior(fastTarget, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded {
			t.Errorf("5.75%% over 10000 requests: %s (%s), want over budget", res.DerivedReason, res.Reason)
		}
		f.hedging(10000, 565)
		res = estimate(t, f, ownPolicy(prior(fastTarget, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute)))
		if res.DerivedReason != tailcutv1alpha1.ReasonDerived || res.Delay != fastTarget || res.Floor != nil {
			t.Errorf("5.65%% over 10000 requests: %s %s floor %+v, want %s held, Derived", res.Delay, res.DerivedReason, res.Floor, fastTarget)
		}
	})
	t.Run("pauses at max", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, F)
		f.hedging(10000, 2000)
		res := estimate(t, f, ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) { a.Max = dur(50 * ms) }),
			prior(50*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute)))
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonBudgetExceeded {
			t.Errorf("got %s from %s (%s), want hedging paused for BudgetExceeded", res.Delay, res.Source, res.DerivedReason)
		}
	})
	floor := func(ago time.Duration) func(*tailcutv1alpha1.HedgePolicy) {
		return func(p *tailcutv1alpha1.HedgePolicy) {
			p.Status.BudgetFloor = &tailcutv1alpha1.BudgetFloor{Delay: metav1.Duration{Duration: 16 * ms}, Percent: 30, MeasuredAt: metav1.NewTime(now.Add(-ago))}
		}
	}
	// A fast mode at N(10ms, 1ms): le=12 ends at 13ms, 3% + 97% * (1 - Phi(3))
	// slower: 14.3ms with the margin, below the floor.
	t.Run("the floor holds for a window", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, bimodal(10, 0.03))
		res := estimate(t, f, ownPolicy(prior(24*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute), floor(time.Minute)))
		if res.Delay != 17600*time.Microsecond || res.Floor == nil || !strings.Contains(res.Reason, "budget floor 16ms") {
			t.Errorf("got %s, floor %+v, want 17.6ms: 10%% above the 16ms floor (%s)", res.Delay, res.Floor, res.Reason)
		}
	})
	t.Run("a target that rounds to the floor is above it", func(t *testing.T) {
		// A fast mode at N(16ms, 1ms): 19ms + 10% is a hair above 20.9ms in
		// floats and rounds to it. The delay must not land on the floor, where
		// the counters showed the budget broken (the local e2e went 31.4 ->
		// 20.9ms with a 20.9ms floor).
		f := newFakeProm(t)
		f.world(5000, bimodal(16, 0.03))
		atFloor := func(p *tailcutv1alpha1.HedgePolicy) {
			p.Status.BudgetFloor = &tailcutv1alpha1.BudgetFloor{Delay: metav1.Duration{Duration: 20900 * time.Microsecond}, Percent: 6.76, MeasuredAt: metav1.NewTime(now.Add(-10 * time.Second))}
		}
		res := estimate(t, f, ownPolicy(prior(31400*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute), atFloor))
		if res.Delay != 23*ms {
			t.Errorf("got %s, want 23ms: 10%% above the 20.9ms floor (%s)", res.Delay, res.Reason)
		}
	})
	t.Run("and then expires", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, bimodal(10, 0.03))
		// 3% + 97% * (1 - Phi(3)) = 3.13% are slower than 13ms (le=12),
		// within 90% of the budget's share: 13ms, with no margin.
		res := estimate(t, f, ownPolicy(prior(24*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Minute), floor(2*time.Minute)))
		if res.Delay != 13*ms || res.Floor != nil {
			t.Errorf("got %s, floor %+v, want 13ms and no floor (%s)", res.Delay, res.Floor, res.Reason)
		}
	})
}

// TestHedgingHurts: queueing (the median climbs, the fast requests stay fast)
// pauses hedging; a service that got slower as a whole does not.
func TestHedgingHurts(t *testing.T) {
	before := bimodal(15, 0.03)
	// 30% still find a free server at 15ms, the rest wait about 15ms more.
	queued := func(ms float64) float64 { return 0.3*normalCDF(ms, 15, 1) + 0.7*normalCDF(ms, 30, 3) }
	setup := func(t *testing.T, now func(float64) float64) *fakeProm {
		f := newFakeProm(t)
		f.world(5000, now)
		f.set(kPrev, bucketsReply(5000, before))
		f.hedging(10000, 400) // 4%: hedges are a real share of the traffic
		return f
	}
	inForce := prior(40*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute)
	t.Run("queueing pauses", func(t *testing.T) {
		res := estimate(t, setup(t, queued), ownPolicy(inForce))
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts {
			t.Fatalf("got %s from %s (%s: %s), want hedging paused, HedgingHurts", res.Delay, res.Source, res.DerivedReason, res.Reason)
		}
		if res.Quantile == nil || res.HedgeRate == nil {
			t.Errorf("the readings behind the pause are missing")
		}
	})
	t.Run("a slower service: no pause", func(t *testing.T) {
		res := estimate(t, setup(t, bimodal(30, 0.03)), ownPolicy(inForce))
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("got %s from %s (%s), want hedging to go on", res.Delay, res.Source, res.Reason)
		}
	})
	t.Run("few hedges: no pause, no extra query", func(t *testing.T) {
		f := setup(t, queued)
		f.hedging(10000, 100) // 1% < half the budget
		res := estimate(t, f, ownPolicy(inForce))
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus {
			t.Errorf("got %s from %s (%s), want hedging to go on", res.Delay, res.Source, res.Reason)
		}
		for _, q := range f.queries() {
			if kindOf(q) == kPrev {
				t.Errorf("the previous window was read although the hedge rate is low")
			}
		}
	})
	paused := []func(*tailcutv1alpha1.HedgePolicy){
		prior(0, tailcutv1alpha1.DelaySourceNone, 30*time.Second, time.Minute), derivedCondition(tailcutv1alpha1.ReasonHedgingHurts)}
	t.Run("pause holds although the data recovered", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		res := estimate(t, f, ownPolicy(paused...))
		if res.Source != tailcutv1alpha1.DelaySourceNone || res.DerivedReason != tailcutv1alpha1.ReasonHedgingHurts {
			t.Errorf("got %s from %s (%s), want the pause to hold for max(window, 2 intervals)", res.Delay, res.Source, res.Reason)
		}
	})
	t.Run("pause holds through a metrics outage", func(t *testing.T) {
		f := newFakeProm(t)
		f.set(kBuckets, reply{Code: 500})
		res := estimate(t, f, ownPolicy(append([]func(*tailcutv1alpha1.HedgePolicy){fallbackStatic(40 * ms)}, paused...)...))
		if res.Source != tailcutv1alpha1.DelaySourceNone {
			t.Errorf("got %s from %s, want the pause to hold, not the fallback", res.Delay, res.Source)
		}
	})
	t.Run("resumes after the hold", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		res := estimate(t, f, ownPolicy(prior(0, tailcutv1alpha1.DelaySourceNone, 30*time.Second, 2*time.Minute),
			derivedCondition(tailcutv1alpha1.ReasonHedgingHurts)))
		if res.Source != tailcutv1alpha1.DelaySourcePrometheus || res.Delay != fastTarget {
			t.Errorf("got %s from %s (%s), want hedging to resume at %s", res.Delay, res.Source, res.Reason, fastTarget)
		}
	})
	t.Run("a spec change lifts the pause", func(t *testing.T) {
		f := newFakeProm(t)
		f.world(5000, before)
		policy := ownPolicy(paused...)
		policy.Generation = 2
		if res := estimate(t, f, policy); res.Source != tailcutv1alpha1.DelaySourcePrometheus {
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
		{"unknown variable", `histogram_quantile({{.Quantile}}, rate(x_bucket{svc="{{.Svc}}"}[{{.Window}}]))`, "the template may use only"},
		{"template syntax", `histogram_quantile({{.Quantile}, rate(x[5m]))`, "the template does not parse"},
		{"PromQL syntax", `histogram_quantile({{.Quantile}}, rate(x_bucket{namespace="{{.Namespace}}"}[{{.Window}}])`, "the query is not valid PromQL"},
		{"range vector", `x_bucket{namespace="{{.Namespace}}"}[{{.Window}}]`, "the query returns a range vector"},
		{"empty", `   `, "source Custom needs auto.query"},
		// #14, tenancy: the template is data, and reads only its namespace.
		{"a loop", `{{range 100000000000}}x{{end}}`, "the template may use only {{.Namespace}}, {{.Service}}, {{.Port}}, {{.Quantile}}, {{.Window}}"},
		{"a condition", `{{if .Namespace}}x{namespace="{{.Namespace}}"}{{end}}`, "the template may use only"},
		{"a function", `x{namespace="{{printf "%s" .Namespace}}"}`, "the template may use only"},
		{"a pipeline", `x{namespace="{{.Namespace | html}}"}`, "the template may use only"},
		{"a variable", `{{$n := .Namespace}}x{namespace="{{$n}}"}`, "the template may use only"},
		{"a defined template", `{{define "t"}}x{{end}}x{namespace="{{.Namespace}}"}`, "the template may use only"},
		{"a nested field", `x{namespace="{{.Namespace.Foo}}"}`, "the template may use only"},
		{"no namespace matcher", `histogram_quantile({{.Quantile}}, sum by (le) (rate(x_bucket[{{.Window}}])))`, `every series the query reads must carry namespace="shop"`},
		{"another namespace", `histogram_quantile({{.Quantile}}, sum by (le) (rate(x_bucket{namespace="payments"}[{{.Window}}])))`, `every series the query reads must carry namespace="shop"`},
		{"a namespace regex", `histogram_quantile({{.Quantile}}, sum by (le) (rate(x_bucket{namespace=~"shop|payments"}[{{.Window}}])))`, `every series the query reads must carry namespace="shop"`},
		{"one selector of two without it", `x{namespace="{{.Namespace}}"} or y`, `every series the query reads must carry namespace="shop"`},
		{"a subquery without it", `max_over_time(y[5m:1m])`, `every series the query reads must carry namespace="shop"`},
		{"another policy's Envoy cluster", `histogram_quantile({{.Quantile}}, sum by (le) (rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="tailcut_payments_cart_8080"}[{{.Window}}])))`, `every series the query reads must carry namespace="shop"`},
		{"too long when rendered", strings.Repeat("x ", 9000), "the rendered query is too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeProm(t)
			policy := ownPolicy(custom(tc.query))
			before := counterValue(t, policy, tailcutv1alpha1.ReasonInvalidQuery)
			_, err := sampleAndEstimate(newTestEstimator(t, f, 0), policy, now)
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
			if got := counterValue(t, policy, tailcutv1alpha1.ReasonInvalidQuery); got != before+1 {
				t.Errorf("InvalidQuery not counted")
			}
		})
	}
}

func TestCustomQuery(t *testing.T) {
	f := newFakeProm(t)
	f.set(kQuantile, reply{Body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.042"]}}`})
	policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Source = tailcutv1alpha1.EstimateSourceCustom
		a.Query = `scalar(histogram_quantile({{.Quantile}}, sum by (le) (rate(rpc_seconds_bucket{namespace="{{.Namespace}}",svc="{{.Service}}",port="{{.Port}}"}[{{.Window}}]))))`
	}))
	policy.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
	res := estimate(t, f, policy)
	if res.Delay != 42*ms || res.Source != tailcutv1alpha1.DelaySourcePrometheus {
		t.Errorf("got %s from %s, want 42ms (%s)", res.Delay, res.Source, res.Reason)
	}
	// On the mesh, the hedge counters are the sidecars' own, for the hedged
	// routes; with none exported, the reason says what to enable.
	want := []string{
		`scalar(histogram_quantile(0.95, sum by (le) (rate(rpc_seconds_bucket{namespace="shop",svc="cart",port="8080"}[2m]))))`,
		`sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_retry{namespace="shop"}[2m]))`,
		`sum(increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_total{namespace="shop"}[2m]))`,
	}
	q := f.queries()
	slices.Sort(q)
	slices.Sort(want)
	if !slices.Equal(q, want) {
		t.Errorf("queries %q, want %q", q, want)
	}
	if !strings.Contains(res.Reason, "proxyStatsMatcher") {
		t.Errorf("reason %q does not say how to get the hedge counters on the mesh", res.Reason)
	}
}

// TestMeshLatencyIsTheHedgedRoutes: on an Istio mesh, source Envoy reads the
// clients' sidecars: the latency histogram of the hedged routes (their
// stat_prefix), from the policy's namespace; not Istio's request duration,
// which counts every method and the bypass (#23, defect 8).
func TestMeshLatencyIsTheHedgedRoutes(t *testing.T) {
	f := newFakeProm(t)
	policy := ownPolicy()
	policy.Spec.Publish.Target = tailcutv1alpha1.PublishIstio
	_ = estimate(t, f, policy)
	want := `sum by (le) (increase(envoy_vhost_cart_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_time_bucket{namespace="shop"}[2m]))`
	if q := f.queries(); !slices.Contains(q, want) {
		t.Errorf("queries %q lack %q", q, want)
	}
}

// TestMeshDelayComesDownAfterASlowStretch: a policy on a mesh reads with
// queries of its own, and the last two intervals' reading brings its delay
// down there too (recent.go). Over the 2m window 2,500 requests had their fast
// mode at 40ms and 1,500 at 15ms, 5% slow in each; the last two 30s intervals
// hold 750 each, all at 15ms. The window reads 46ms, the intervals 19ms.
func TestMeshDelayComesDownAfterASlowStretch(t *testing.T) {
	f := newFakeProm(t)
	shifted, back := bimodal(40, 0.05), bimodal(15, 0.05)
	f.set(kBuckets, bucketsReply(4000, func(ms float64) float64 { return (2500*shifted(ms) + 1500*back(ms)) / 4000 }))
	f.set(kRecent, bucketsReply(750, back))
	// No hedge counters: the intervals are read whatever the hedge rate,
	// not only when the "hedging hurts" guard needs the window before.
	policy := ownPolicy(prior(45100*time.Microsecond, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, 10*time.Minute))
	res := estimate(t, f, policy)
	if res.Target != 20900*time.Microsecond || res.Delay >= 45100*time.Microsecond ||
		!strings.Contains(res.Reason, "the last two evaluation intervals (1500 requests) are faster than the rest of the span") {
		t.Errorf("delay %s, target %s (%s), want a target of 20.9ms read from the last two intervals", res.Delay, res.Target, res.Reason)
	}
	if res.Quantile == nil || res.Quantile.Samples != 1500 {
		t.Errorf("quantile %+v, want read from the intervals' 1500 requests", res.Quantile)
	}
}

// TestCustomQueryMayReadItsOwnEnvoyCluster: Envoy's stats carry no namespace
// label; a Custom query may read the policy's own clusters by name.
// TestCustomQueryStepsUp: with no histogram, nothing proves what a higher
// quantile costs, and the delay rises within the step limit.
func TestCustomQueryStepsUp(t *testing.T) {
	f := newFakeProm(t)
	f.set(kQuantile, reply{Body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.040"]}}`})
	policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Source = tailcutv1alpha1.EstimateSourceCustom
		a.Query = `scalar(histogram_quantile({{.Quantile}}, sum by (le) (rate(rpc_seconds_bucket{namespace="{{.Namespace}}",svc="{{.Service}}"}[{{.Window}}]))))`
	}), prior(10*ms, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour))
	// 10ms + 50% = 15ms on the way to 40ms.
	if res := estimate(t, f, policy); res.Delay != 15*ms || res.DerivedReason != tailcutv1alpha1.ReasonDerived {
		t.Errorf("got %s %s, want 15ms Derived (%s)", res.Delay, res.DerivedReason, res.Reason)
	}
}

func TestCustomQueryMayReadItsOwnEnvoyCluster(t *testing.T) {
	f := newFakeProm(t)
	f.set(kQuantile, reply{Body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.031"]}}`})
	policy := ownPolicy(auto(func(a *tailcutv1alpha1.AutoDelay) {
		a.Source = tailcutv1alpha1.EstimateSourceCustom
		a.Query = `scalar(histogram_quantile({{.Quantile}}, sum by (le) (rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="tailcut_{{.Namespace}}_{{.Service}}_{{.Port}}"}[{{.Window}}]))) / 1000)`
	}))
	res := estimate(t, f, policy)
	if res.Delay != 31*ms {
		t.Errorf("got %s from %s (%s), want 31ms", res.Delay, res.Source, res.Reason)
	}
}

func TestStaticPolicyNeedsNoQuery(t *testing.T) {
	f := newFakeProm(t)
	policy := ownPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeStatic, Static: dur(25 * ms)}
	})
	res, err := sampleAndEstimate(newTestEstimator(t, f, 0), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delay != 25*ms || res.Source != tailcutv1alpha1.DelaySourceStatic || len(f.queries()) != 0 {
		t.Errorf("got %s from %s after %d queries, want static 25ms and no query", res.Delay, res.Source, len(f.queries()))
	}
}

// TestFanOutPolicyNeedsNoQuery: a FanOut policy's delay is the shortest
// per-try timeout, whatever Prometheus says, and its reason states what it
// costs.
func TestFanOutPolicyNeedsNoQuery(t *testing.T) {
	f := newFakeProm(t)
	policy := ownPolicy(func(p *tailcutv1alpha1.HedgePolicy) {
		p.Spec.Delay = tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeFanOut}
		p.Spec.MaxHedges = 2
		p.Spec.Budget.MaxExtraLoadPercent = 200
	})
	res, err := sampleAndEstimate(newTestEstimator(t, f, 0), policy, now)
	if err != nil {
		t.Fatal(err)
	}
	const reason = "fan-out (spec.delay.mode FanOut): 2 more copies of each request 1ms apart, as the 200% budget allows"
	if res.Delay != ms || res.Source != tailcutv1alpha1.DelaySourceFanOut || res.DerivedReason != tailcutv1alpha1.ReasonFanOut || res.Reason != reason || len(f.queries()) != 0 {
		t.Errorf("got %s from %s (%s: %q) after %d queries, want 1ms from FanOut (%q) and no query", res.Delay, res.Source, res.DerivedReason, res.Reason, len(f.queries()), reason)
	}
}

func TestMetrics(t *testing.T) {
	f := newFakeProm(t)
	f.world(5000, bimodal(15, 0.03))
	f.hedging(10000, 300)
	policy := ownPolicy(func(p *tailcutv1alpha1.HedgePolicy) { p.Name = "metrics" },
		prior(fastTarget, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Hour))
	estimate(t, f, policy)
	var m dto.Metric
	if err := delaySeconds.WithLabelValues(PolicyLabels("shop", "metrics")...).Write(&m); err != nil || math.Abs(m.GetGauge().GetValue()-fastTarget.Seconds()) > 1e-9 {
		t.Errorf("tailcut_hedge_delay_seconds = %v (%v), want %v", m.GetGauge().GetValue(), err, fastTarget.Seconds())
	}
	if err := hedgeRate.WithLabelValues(PolicyLabels("shop", "metrics")...).Write(&m); err != nil || math.Abs(m.GetGauge().GetValue()-0.03) > 1e-9 {
		t.Errorf("tailcut_hedge_rate = %v (%v), want 0.03", m.GetGauge().GetValue(), err)
	}
	if err := quantileSeconds.WithLabelValues(append(PolicyLabels("shop", "metrics"), "0.95", "false")...).Write(&m); err != nil || math.Abs(m.GetGauge().GetValue()-0.017) > 1e-9 {
		t.Errorf("tailcut_hedge_quantile_seconds = %v (%v), want 0.017", m.GetGauge().GetValue(), err)
	}
	// An evaluation that reads nothing (within an interval of a change) keeps
	// the last readings, as status does.
	held := ownPolicy(func(p *tailcutv1alpha1.HedgePolicy) { p.Name = "metrics" },
		prior(fastTarget, tailcutv1alpha1.DelaySourcePrometheus, 30*time.Second, time.Second))
	estimate(t, f, held)
	if !hasSeries(hedgeRate, "shop/metrics") || !hasSeries(quantileSeconds, "shop/metrics") {
		t.Errorf("an evaluation without a reading removed the last hedge rate or quantile")
	}
	ForgetPolicy("shop", "metrics")
	for _, c := range []prometheus.Collector{delaySeconds, hedgeRate, quantileSeconds, estimateErrors} {
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
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		// Every per-policy series names its policy whole and apart.
		if labels["policy"] == policy && labels["policy_namespace"]+"/"+labels["policy_name"] == policy {
			found = true
		}
	}
	return found
}

// TestReconcileAfterTheTickReadsTheSamplersReading: in production the
// reconcile that evaluates a policy runs after the sampler's tick that made
// it due (its work queue: milliseconds, or seconds behind a queue), never at
// the same instant, as sampleAndEstimate has it. A Workload, Custom, mesh or
// gateway policy's reading is the sampler's, taken at its tick; an Estimate
// 300 ms after the tick used to find no reading for its own span (one that
// started 300 ms later), and every such policy said "waiting for the first
// reading" for ever. Found with a real Envoy Gateway and Prometheus
// (TestGatewayHedgesWithRealEnvoyGateway). A reading an interval old or
// older is not used: the policy is due again.
func TestReconcileAfterTheTickReadsTheSamplersReading(t *testing.T) {
	for _, tc := range []struct {
		after   time.Duration
		derived bool
	}{
		{0, true},
		{300 * ms, true},
		{5 * time.Second, true},
		{30 * time.Second, false}, // the default evaluationInterval
	} {
		f := newFakeProm(t)
		f.world(5000, bimodal(15, 0.03))
		est := newTestEstimator(t, f, 0)
		policy := ownPolicy()
		list := func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
			return []tailcutv1alpha1.HedgePolicy{*policy}, nil
		}
		est.Sampler(list, nil, logr.Discard()).Tick(context.Background(), now)
		res, err := est.Estimate(context.Background(), policy, now.Add(tc.after))
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, policy, res)
		if derived := res.Source == tailcutv1alpha1.DelaySourcePrometheus; derived != tc.derived {
			t.Errorf("Estimate %s after the tick: %s from %s (%s), want derived from Prometheus = %v", tc.after, res.Delay, res.Source, res.Reason, tc.derived)
		}
	}
}
