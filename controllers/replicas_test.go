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
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/replicas"
)

// TestStatusCountsProxiesOnEveryReplica: proxies connected to a follower
// replica count in the policy's status. Before package replicas the leader
// counted only its own streams, so a follower's proxy that rejected a version
// left the policy Programmed=True.
func TestStatusCountsProxiesOnEveryReplica(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	key := types.NamespacedName{Namespace: ns, Name: "policy"}
	publisher.setStatus(key, publish.ProgramStatus{Connected: 1, Programmed: 1, Serving: 1, Version: "v1"})
	newPolicy(t, ns, "checkout", staticDelay(20*time.Millisecond))
	waitProxies(t, key, 1, 1)

	// A follower's real Reporter, fed by a stand-in for its xDS server.
	follower := &fakeStatuses{}
	follower.set(key, publish.ProgramStatus{Connected: 2, Programmed: 2, Serving: 2, Version: "v1"})
	ctx, stop := context.WithCancel(context.Background())
	reporterDone := make(chan error, 1)
	go func() {
		r := &replicas.Reporter{Client: k8s, Namespace: reportNamespace, Replica: "follower-" + ns, Source: follower, Period: 50 * time.Millisecond, RenewPeriod: time.Second}
		reporterDone <- r.Start(ctx)
	}()
	defer stop()
	waitProxies(t, key, 3, 3)

	// The follower's proxies reject the version: the policy is not Programmed.
	follower.set(key, publish.ProgramStatus{Connected: 2, Version: "v1", Rejected: "envoy-f rejected RDS: bad route"})
	got := waitCondition(t, key, tailcutv1alpha1.ConditionProgrammed, metav1.ConditionFalse, tailcutv1alpha1.ReasonRejected)
	if c := conditionOf(got, tailcutv1alpha1.ConditionProgrammed); !strings.Contains(c.Message, "bad route") {
		t.Errorf("Programmed message %q lacks the follower's proxy's error", c.Message)
	}

	// A follower still on an older version: its proxies are connected and
	// serve the policy, but do not run the current version.
	follower.set(key, publish.ProgramStatus{Connected: 2, Programmed: 2, Serving: 2, Version: "v0"})
	waitProxies(t, key, 3, 1)

	// The follower stops: its report goes, and so do its proxies.
	stop()
	if err := <-reporterDone; err != nil {
		t.Fatal(err)
	}
	waitProxies(t, key, 1, 1)

	// A replica that dies without removing its report: it counts until it
	// is not renewed within the TTL; then the leader deletes it.
	dead := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: reportNamespace, Name: "tailcut-proxies-dead-" + ns,
		Labels:      map[string]string{replicas.ReportLabel: "dead-" + ns},
		Annotations: map[string]string{"tailcut.io/renewed": time.Now().UTC().Format(time.RFC3339)},
	}, Data: map[string]string{"report.json": fmt.Sprintf(`{"replica":"dead-%s","policies":{%q:{"version":"v1","connected":5,"programmed":5,"serving":5}}}`, ns, key.String())}}
	if err := k8s.Create(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	waitProxies(t, key, 6, 6)
	eventually(t, "the dead replica's report deleted", func() error {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: reportNamespace, Name: dead.Name}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	waitProxies(t, key, 1, 1)
}

func waitProxies(t *testing.T, key types.NamespacedName, connected, programmed int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d proxies connected, %d programmed", connected, programmed), func() error {
		var p tailcutv1alpha1.HedgePolicy
		if err := k8s.Get(context.Background(), key, &p); err != nil {
			return err
		}
		if px := p.Status.Proxies; px == nil || px.Connected != connected || px.Programmed != programmed {
			return fmt.Errorf("proxies %+v", px)
		}
		return nil
	})
}

// fakeStatuses stands in for a follower's xDS server.
type fakeStatuses struct {
	mu sync.Mutex
	m  map[types.NamespacedName]publish.ProgramStatus
}

func (f *fakeStatuses) set(key types.NamespacedName, ps publish.ProgramStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m = map[types.NamespacedName]publish.ProgramStatus{key: ps}
}

func (f *fakeStatuses) Statuses() map[types.NamespacedName]publish.ProgramStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}
