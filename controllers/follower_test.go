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
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// TestFollowerPublishesTheLeadersDelay runs a follower beside the suite's
// reconciler (the leader): the follower's own publisher must end up with the
// delay the leader wrote to status, and drop the policy once it is deleted.
func TestFollowerPublishesTheLeadersDelay(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	newEndpointSlice(t, ns, "checkout", 9090, map[string]bool{"10.0.0.7": true})
	key := types.NamespacedName{Namespace: ns, Name: "policy"}
	p := newPolicy(t, ns, "checkout", staticDelay(35*time.Millisecond))

	follower := newRecordingPublisher()
	var mu sync.Mutex
	var marked [][]types.NamespacedName
	elected := make(chan struct{})
	f := &FollowerPublisher{
		Reconciler:       &HedgePolicyReconciler{Client: k8s},
		Publisher:        follower,
		Elected:          elected,
		WaitForCacheSync: func(context.Context) bool { return true },
		MarkSynced: func(keys ...types.NamespacedName) {
			mu.Lock()
			defer mu.Unlock()
			marked = append(marked, keys)
		},
		Interval: 100 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	t.Cleanup(cancel)

	eventually(t, "follower plan with the leader's delay", func() error {
		rp, ok := follower.plan(key)
		if !ok || rp.Hedge == nil || rp.Hedge.Delay != 35*time.Millisecond || len(rp.Endpoints) != 1 {
			return fmt.Errorf("follower plan %+v (published %v)", rp, ok)
		}
		return nil
	})
	mu.Lock()
	if len(marked) != 1 {
		t.Errorf("MarkSynced called %d times, want once", len(marked))
	}
	mu.Unlock()

	if err := k8s.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "follower withdraws the deleted policy", func() error {
		if _, ok := follower.plan(key); ok {
			return fmt.Errorf("still published")
		}
		return nil
	})
	close(elected)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v on election", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower kept running after this replica was elected")
	}
}

// refusingPublisher fails to publish one policy, as a publisher does with a
// plan it cannot serve.
type refusingPublisher struct {
	*recordingPublisher
	refuse types.NamespacedName
}

func (p refusingPublisher) Publish(ctx context.Context, owner *tailcutv1alpha1.HedgePolicy, rp plan.RoutePlan) error {
	if client.ObjectKeyFromObject(owner) == p.refuse {
		return fmt.Errorf("refused")
	}
	return p.recordingPublisher.Publish(ctx, owner, rp)
}

// TestFollowerSyncsDespiteABadPolicy is issue #12's defect 2: a follower marked
// itself synced only after a pass without any error, so one policy it could
// not publish kept it from ever serving xDS.
func TestFollowerSyncsDespiteABadPolicy(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	newService(t, ns, "cart", 8080)
	good := newPolicy(t, ns, "checkout", staticDelay(20*time.Millisecond))
	bad := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: "cart", Port: 8080}},
	}
	staticDelay(20 * time.Millisecond)(&bad.Spec)
	if err := k8s.Create(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	pub := refusingPublisher{recordingPublisher: newRecordingPublisher(), refuse: client.ObjectKeyFromObject(bad)}
	var mu sync.Mutex
	var marked []types.NamespacedName
	synced := false
	f := &FollowerPublisher{
		Reconciler: &HedgePolicyReconciler{Client: k8s}, Publisher: pub, Elected: make(chan struct{}),
		WaitForCacheSync: func(context.Context) bool { return true },
		MarkSynced: func(keys ...types.NamespacedName) {
			mu.Lock()
			defer mu.Unlock()
			marked, synced = keys, true
		},
		Interval: 100 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = f.Start(ctx) }()
	eventually(t, "the follower marks itself synced", func() error {
		mu.Lock()
		defer mu.Unlock()
		if !synced {
			return fmt.Errorf("not synced: one refused policy holds the follower back")
		}
		if !slices.Contains(marked, client.ObjectKeyFromObject(good)) {
			return fmt.Errorf("synced with %v, without the good policy", marked)
		}
		return nil
	})
}
