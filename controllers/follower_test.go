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
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/target"
	"github.com/tailcut/tailcut/controllers/xds"
	"github.com/tailcut/tailcut/test/envtestutil"
)

// startFollower runs a follower in a manager of its own, as a replica that is
// not the leader would, beside the suite's reconciler (the leader).
func startFollower(t *testing.T, pub publish.Publisher, elected <-chan struct{}) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 envtestutil.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every test starts a controller named hedgepolicy-follower.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := target.IndexPolicies(mgr); err != nil {
		t.Fatal(err)
	}
	f := &FollowerPublisher{Client: mgr.GetClient(), Publisher: pub, Elected: elected}
	if err := f.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follower manager: %v", err)
		}
	})
}

// TestFollowerPublishesTheLeadersDelay: the follower's own publisher must end
// up with the delay the leader wrote to status, retire the policy once it is
// deleted, as the leader does, and stand down once this replica is elected.
func TestFollowerPublishesTheLeadersDelay(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	newEndpointSlice(t, ns, "checkout", 9090, map[string]bool{"10.0.0.7": true})
	key := types.NamespacedName{Namespace: ns, Name: "policy"}
	p := newPolicy(t, ns, "checkout", staticDelay(35*time.Millisecond))

	follower := newRecordingPublisher()
	elected := make(chan struct{})
	startFollower(t, follower, elected)
	eventually(t, "follower plan with the leader's delay", func() error {
		rp, ok := follower.plan(key)
		if !ok || rp.Hedge == nil || rp.Hedge.Delay != 35*time.Millisecond || len(rp.Endpoints) != 1 {
			return fmt.Errorf("follower plan %+v (published %v)", rp, ok)
		}
		return nil
	})
	// An endpoint change reaches the follower's plan.
	var es discoveryv1.EndpointSlice
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "checkout-1"}, &es); err != nil {
		t.Fatal(err)
	}
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.8"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	if err := k8s.Update(context.Background(), &es); err != nil {
		t.Fatal(err)
	}
	eventually(t, "follower plan with the new endpoint", func() error {
		if rp, _ := follower.plan(key); len(rp.Endpoints) != 2 {
			return fmt.Errorf("follower plan endpoints %+v", rp.Endpoints)
		}
		return nil
	})

	if err := k8s.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "follower retires the deleted policy", func() error {
		if follower.retirements(key) == 0 {
			return fmt.Errorf("not retired")
		}
		if rp, ok := follower.plan(key); !ok || rp.Hedge != nil {
			return fmt.Errorf("plan held %v, hedge %+v; want the route, unhedged", ok, rp.Hedge)
		}
		return nil
	})
	if n := follower.removals(key); n != 0 {
		t.Errorf("the follower removed the deleted policy's route %d times; its clients would get 404", n)
	}

	close(elected)
	// The new policy has the deleted one's name: the follower still holds
	// its retired plan, so what counts is that it publishes nothing more.
	publishedBefore := follower.publishes(key)
	later := newPolicy(t, ns, "checkout", staticDelay(20*time.Millisecond))
	eventually(t, "the leader publishes the new policy", func() error {
		if _, ok := publisher.plan(client.ObjectKeyFromObject(later)); !ok {
			return fmt.Errorf("not published by the leader")
		}
		return nil
	})
	time.Sleep(time.Second)
	if n := follower.publishes(client.ObjectKeyFromObject(later)); n != publishedBefore {
		t.Errorf("the follower published %d times after this replica was elected", n-publishedBefore)
	}
}

// TestFollowerWaitsForEvents is issue #12's defect 10 for followers: each
// republished every policy every 2 s. A follower acts on events only: nothing
// is published while nothing changes, and a new delay in status is published
// at once.
func TestFollowerWaitsForEvents(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	newEndpointSlice(t, ns, "checkout", 9090, map[string]bool{"10.0.0.7": true})
	p := newPolicy(t, ns, "checkout", staticDelay(35*time.Millisecond))
	key := client.ObjectKeyFromObject(p)
	follower := newRecordingPublisher()
	startFollower(t, follower, make(chan struct{}))
	eventually(t, "follower plan with the leader's delay", func() error {
		if rp, ok := follower.plan(key); !ok || rp.Hedge == nil || rp.Hedge.Delay != 35*time.Millisecond {
			return fmt.Errorf("follower plan %+v (published %v)", rp, ok)
		}
		return nil
	})
	time.Sleep(time.Second)
	n := follower.publishes(key)
	time.Sleep(5 * time.Second)
	if got := follower.publishes(key); got != n {
		t.Errorf("with nothing changing, the follower published the policy %d more times in 5 s", got-n)
	}

	// The leader's next decision, as it writes it.
	if err := k8s.Get(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	base := p.DeepCopy()
	p.Status.EffectiveDelay = &metav1.Duration{Duration: 47 * time.Millisecond}
	if err := k8s.Status().Patch(context.Background(), p, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "the follower publishes the new delay", func() error {
		if rp, _ := follower.plan(key); rp.Hedge == nil || rp.Hedge.Delay != 47*time.Millisecond {
			return fmt.Errorf("follower plan %+v", rp.Hedge)
		}
		return nil
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the new delay reached the follower after %s", d)
	}
}

// syncingPublisher refuses one policy and reports reconciles to an xDS server,
// the way a publisher that cannot serve a plan does.
type syncingPublisher struct {
	*xds.Server
	refuse types.NamespacedName
}

func (p syncingPublisher) Publish(ctx context.Context, owner publish.Owner, rp plan.RoutePlan) error {
	if owner.KeyOf(rp) == p.refuse {
		return fmt.Errorf("refused")
	}
	return p.Server.Publish(ctx, owner, rp)
}

// TestFollowerSyncsDespiteABadPolicy is issue #12's defect 2: a follower marked
// itself synced only after a pass without any error, so one policy it could
// not publish kept it from ever serving xDS.
func TestFollowerSyncsDespiteABadPolicy(t *testing.T) {
	ns := newNamespace(t)
	newService(t, ns, "checkout", 8080)
	newService(t, ns, "cart", 8080)
	newEndpointSlice(t, ns, "checkout", 9090, map[string]bool{"10.0.0.7": true})
	good := newPolicy(t, ns, "checkout", staticDelay(20*time.Millisecond))
	bad := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec:       tailcutv1alpha1.HedgePolicySpec{TargetRef: tailcutv1alpha1.TargetRef{Name: "cart", Port: 8080}},
	}
	staticDelay(20 * time.Millisecond)(&bad.Spec)
	if err := k8s.Create(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	srv := xds.NewServer(xds.ServerOptions{Address: "127.0.0.1:0"})
	// What InitialSync does on a replica: wait for both.
	srv.MarkSynced(client.ObjectKeyFromObject(good), client.ObjectKeyFromObject(bad))
	startFollower(t, syncingPublisher{Server: srv, refuse: client.ObjectKeyFromObject(bad)}, make(chan struct{}))
	eventually(t, "the follower's server serves", func() error {
		if srv.Version() == "" {
			return fmt.Errorf("not serving: one refused policy holds the follower back")
		}
		if srv.Status(client.ObjectKeyFromObject(good)).Version == "" {
			return fmt.Errorf("serving without the good policy")
		}
		return nil
	})
}
