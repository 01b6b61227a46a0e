//go:build localstack

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
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/test/dashboards"
)

// #26 item 6: one replica of three always 100 ms slower. A third of the
// requests are slow, far more than a 5% budget can hedge. On its own proxy
// tailcut weighs the slow endpoint down instead: it reads each endpoint's
// mean latency from Envoy's per-endpoint stats, lowers the slow one's weight
// until it takes half the budget's share of the requests (weight 5 against
// 100: 2.4%), and hedges the rest. The policy names the endpoint
// (status.slowEndpoints, EndpointsBalanced False SlowEndpoint, a Warning
// event, tailcut_endpoint_weight), and the hedged p99 is cut to at most half
// the unhedged within the 5% budget. The bypass arm, which stands for the
// route without tailcut, keeps the three endpoints even.
func TestOneSlowReplicaIsWeightedDown(t *testing.T) {
	s, ctx := startStackWithin(t, "badhost", 10*time.Minute)
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	slowAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Ports.Workloads[0]))
	p, err := s.WaitReady(ctx, 150, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	balanced := meta.FindStatusCondition(p.Status.Conditions, tailcutv1alpha1.ConditionEndpointsBalanced)
	if balanced == nil || balanced.Status != metav1.ConditionFalse || balanced.Reason != tailcutv1alpha1.ReasonSlowEndpoint {
		t.Fatalf("EndpointsBalanced is %+v, want False SlowEndpoint", balanced)
	}
	t.Logf("EndpointsBalanced=False: %s; delay: %s", balanced.Message, p.Status.DelayReason)
	if len(p.Status.SlowEndpoints) != 1 {
		t.Fatalf("slow endpoints %+v, want %s alone", p.Status.SlowEndpoints, slowAddr)
	}
	// Half of the 5% budget against two endpoints at 100: w / (w + 200) =
	// 0.025, w = 5.1.
	// The median endpoint's mean is the fast replicas' 15 ms and Envoy's
	// hop, read from scrapes of about one request in flight (0.8 at 50/s):
	// over the 2 s scrapes of the minute or more before the weighing, 24 or
	// more seen, known to 1/sqrt(24) = 20%, so within 3 standard errors
	// of 16.5 ms: [6.6ms, 26.4ms]. Read without the per-series windows
	// (PromQL's rate over a younger series) it was 46 ms.
	se := p.Status.SlowEndpoints[0]
	if se.Address != slowAddr || se.Weight != 5 || se.MeanLatency.Duration < 2*se.MedianLatency.Duration ||
		se.MedianLatency.Duration < 6600*time.Microsecond || se.MedianLatency.Duration > 26400*time.Microsecond {
		t.Errorf("slow endpoint %+v, want %s at weight 5, the median in [6.6ms, 26.4ms], its mean at least twice that", se, slowAddr)
	}
	waitFor(t, ctx, "a Warning event and tailcut_endpoint_weight", time.Minute, func() (bool, string) {
		var evs eventsv1.EventList
		if err := s.Client.List(ctx, &evs, client.InNamespace(Namespace)); err != nil {
			return false, err.Error()
		}
		event := false
		for _, e := range evs.Items {
			event = event || (e.Reason == tailcutv1alpha1.ReasonSlowEndpoint && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, slowAddr))
		}
		w, err := metricSum(s.opts.Ports.Metrics, "tailcut_endpoint_weight", `endpoint="`+slowAddr+`"`)
		if err != nil {
			return false, err.Error()
		}
		return event && w == 5, fmt.Sprintf("event %v, tailcut_endpoint_weight %v", event, w)
	})
	prom, values := dashboardQueries(t, s)
	waitFor(t, ctx, "the policy dashboard's weighted endpoint", time.Minute, func() (bool, string) {
		w, expr, err := dashboards.PanelValue(ctx, prom, chartDashboards, "tailcut-policy.json", "Endpoints weighted down", "A", values)
		if err != nil {
			return false, err.Error()
		}
		return w == 5, fmt.Sprintf("%s = %v, want 5", expr, w)
	})
	r, _, err := s.RunAB(ctx, ABOptions{Rate: 150, Duration: time.Minute, MaxP99Ratio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	logTable(t, r)
	checkPromises(t, r, 0.5)
}
