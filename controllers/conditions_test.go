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

package controllers

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/publish"
)

// TestConditionsOfEveryState is #24's table: in each state a policy can be
// in, its Ready and Hedging conditions, and what `kubectl wait
// --for=condition=Ready` (the real kubectl, against the real API server)
// makes of it. Ready is True whenever the policy works as designed, a
// suspend, a pause and hedging turned off by the fallback included; its
// reason, and Hedging's (kubectl get hp's REASON column), name the case.
func TestConditionsOfEveryState(t *testing.T) {
	const fallback = 40 * time.Millisecond
	ready := publish.ProgramStatus{Connected: 2, Programmed: 2, Serving: 2, Version: "v1"}
	admin, err := testEnv.AddUser(envtest.User{Name: "conditions-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := admin.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// service and endpoints: the target Service exists, with a ready
		// endpoint.
		service, endpoints bool
		proxies            publish.ProgramStatus
		spec               func(*tailcutv1alpha1.HedgePolicySpec)
		paused             string
		conflicting        bool

		ready          metav1.ConditionStatus
		readyReason    string
		hedging        metav1.ConditionStatus
		hedgingReason  string
		delay          time.Duration
		source         tailcutv1alpha1.DelaySource
		messageHasText string // in Hedging's message
	}{
		{name: "static delay", service: true, endpoints: true, proxies: ready, spec: staticDelay(20 * time.Millisecond),
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionTrue, hedgingReason: tailcutv1alpha1.ReasonStatic, delay: 20 * time.Millisecond, source: tailcutv1alpha1.DelaySourceStatic},
		{name: "no Prometheus, static fallback", service: true, endpoints: true, proxies: ready,
			spec: func(s *tailcutv1alpha1.HedgePolicySpec) {
				s.Delay.Auto = &tailcutv1alpha1.AutoDelay{Fallback: &tailcutv1alpha1.Fallback{
					Action: tailcutv1alpha1.FallbackStatic, Delay: &metav1.Duration{Duration: fallback}}}
			},
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionTrue, hedgingReason: tailcutv1alpha1.ReasonNoMetrics, delay: fallback, source: tailcutv1alpha1.DelaySourceFallback,
			messageHasText: "--prometheus-url"},
		{name: "no Prometheus, fallback Disable", service: true, endpoints: true, proxies: ready,
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonNoMetrics, source: tailcutv1alpha1.DelaySourceNone,
			messageHasText: "hedging is off"},
		{name: "suspended", service: true, endpoints: true, proxies: ready,
			spec:  func(s *tailcutv1alpha1.HedgePolicySpec) { staticDelay(20 * time.Millisecond)(s); s.Suspend = true },
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonSuspended, source: tailcutv1alpha1.DelaySourceNone},
		{name: "paused: hedging hurts", service: true, endpoints: true, proxies: ready, paused: tailcutv1alpha1.ReasonHedgingHurts,
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonHedgingHurts, source: tailcutv1alpha1.DelaySourceNone,
			messageHasText: "hedging paused"},
		{name: "paused: over budget at max", service: true, endpoints: true, proxies: ready, paused: tailcutv1alpha1.ReasonBudgetExceeded,
			ready: metav1.ConditionTrue, readyReason: tailcutv1alpha1.ReasonReady,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonBudgetExceeded, source: tailcutv1alpha1.DelaySourceNone},
		{name: "no Service", proxies: ready, spec: staticDelay(20 * time.Millisecond),
			ready: metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonTargetNotFound,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonTargetNotFound, source: tailcutv1alpha1.DelaySourceNone},
		{name: "no such port", service: true, endpoints: true, proxies: ready,
			spec: func(s *tailcutv1alpha1.HedgePolicySpec) {
				staticDelay(20 * time.Millisecond)(s)
				s.TargetRef.Port = 9999
			},
			ready: metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonPortNotFound,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonPortNotFound, source: tailcutv1alpha1.DelaySourceNone},
		{name: "no ready endpoint", service: true, proxies: ready, spec: staticDelay(20 * time.Millisecond),
			ready: metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonNoEndpoints,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonNoEndpoints, delay: 20 * time.Millisecond, source: tailcutv1alpha1.DelaySourceStatic,
			messageHasText: "503"},
		{name: "no proxy connected", service: true, endpoints: true, spec: staticDelay(20 * time.Millisecond),
			ready: metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonNoProxies,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonNoProxies, delay: 20 * time.Millisecond, source: tailcutv1alpha1.DelaySourceStatic},
		{name: "a proxy rejected the routes", service: true, endpoints: true, spec: staticDelay(20 * time.Millisecond),
			proxies: publish.ProgramStatus{Connected: 2, Programmed: 1, Serving: 1, Version: "v1", Rejected: "envoy-a rejected RDS: bad regex"},
			ready:   metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonRejected,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonRejected, delay: 20 * time.Millisecond, source: tailcutv1alpha1.DelaySourceStatic,
			messageHasText: "bad regex"},
		{name: "an older policy routes the port", service: true, endpoints: true, proxies: ready, spec: staticDelay(20 * time.Millisecond), conflicting: true,
			ready: metav1.ConditionFalse, readyReason: tailcutv1alpha1.ReasonConflicted,
			hedging: metav1.ConditionFalse, hedgingReason: tailcutv1alpha1.ReasonConflicted, source: tailcutv1alpha1.DelaySourceNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			if tc.service {
				newService(t, ns, "checkout", 8080)
			}
			if tc.endpoints {
				newEndpointSlice(t, ns, "checkout", 9090, map[string]bool{"10.0.0.7": true})
			}
			if tc.conflicting {
				older := types.NamespacedName{Namespace: ns, Name: "older"}
				publisher.setStatus(older, ready)
				newPolicyNamed(t, ns, "older", "checkout", staticDelay(10*time.Millisecond), nil)
				waitCondition(t, older, tailcutv1alpha1.ConditionReady, metav1.ConditionTrue, tailcutv1alpha1.ReasonReady)
			}
			key := types.NamespacedName{Namespace: ns, Name: "policy"}
			publisher.setStatus(key, tc.proxies)
			var annotations map[string]string
			if tc.paused != "" {
				annotations = map[string]string{pauseAnnotation: tc.paused}
			}
			newPolicyNamed(t, ns, "policy", "checkout", tc.spec, annotations)

			got := waitCondition(t, key, tailcutv1alpha1.ConditionHedging, tc.hedging, tc.hedgingReason)
			r := conditionOf(got, tailcutv1alpha1.ConditionReady)
			if r.Status != tc.ready || r.Reason != tc.readyReason {
				t.Errorf("Ready %s/%s, want %s/%s (%s)", r.Status, r.Reason, tc.ready, tc.readyReason, r.Message)
			}
			if r.Reason == "NotReady" {
				t.Error("Ready's reason is the generic NotReady")
			}
			var delay time.Duration
			if got.Status.EffectiveDelay != nil {
				delay = got.Status.EffectiveDelay.Duration
			}
			if delay != tc.delay || got.Status.DelaySource != tc.source {
				t.Errorf("delay %s from %q, want %s from %q", delay, got.Status.DelaySource, tc.delay, tc.source)
			}
			if h := conditionOf(got, tailcutv1alpha1.ConditionHedging); !strings.Contains(h.Message, tc.messageHasText) {
				t.Errorf("Hedging's message %q lacks %q", h.Message, tc.messageHasText)
			}

			// kubectl wait succeeds exactly when Ready is True.
			stdout, stderr, err := kubectl.Run("wait", "-n", ns, "hedgepolicy/policy", "--for=condition=Ready", "--timeout=2s")
			out := readAll(stdout) + readAll(stderr)
			if waited := err == nil; waited != (tc.ready == metav1.ConditionTrue) {
				t.Errorf("kubectl wait --for=condition=Ready: %v (%s), want success %v", err, strings.TrimSpace(out), tc.ready == metav1.ConditionTrue)
			}
		})
	}
}

func readAll(r io.Reader) string {
	if r == nil {
		return ""
	}
	b, _ := io.ReadAll(r)
	return string(b)
}

// newPolicyNamed creates a policy with a name and annotations of its own.
func newPolicyNamed(t *testing.T, ns, name, target string, mutate func(*tailcutv1alpha1.HedgePolicySpec), annotations map[string]string) *tailcutv1alpha1.HedgePolicy {
	t.Helper()
	p := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: target, Port: 8080}},
	}
	if mutate != nil {
		mutate(&p.Spec)
	}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}
