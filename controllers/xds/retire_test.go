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

package xds

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

// TestRetiredRouteKeepsTheTraffic is #23's "deleting a policy cuts traffic"
// on a real Envoy. GETs run at 150 a second, one in ten slow; 1.5 s in, the
// policy is retired, as the reconciler does when it is deleted. With the
// route removed instead (RetireAfter 0), 375 of the run's 600 requests got
// 404 and one 503. Retired, every request is answered 200 and the slow ones
// are no longer hedged; once RetireAfter has passed, the route is gone.
func TestRetiredRouteKeepsTheTraffic(t *testing.T) {
	const (
		rate        = 150
		length      = 4 * time.Second
		retireAt    = 1500 * time.Millisecond
		retireAfter = 8 * time.Second
	)
	up := harness.NewUpstream(t, 0)
	key := k8stypes.NamespacedName{Namespace: "e2e", Name: "web"}
	srv, listenPort := serveWith(t, up, func(o *ServerOptions) { o.RetireAfter = retireAfter }, func(p *plan.RoutePlan) {
		p.Budget = plan.Budget{Percent: 100, MinConcurrency: 3}
	})
	client := newLoadClient()
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		sentAt   = map[string]time.Duration{}
	)
	start := time.Now()
	retired := make(chan time.Duration, 1)
	time.AfterFunc(retireAt, func() {
		if err := srv.Retire(context.Background(), key); err != nil {
			t.Error(err)
		}
		retired <- time.Since(start)
	})
	paced(rate, length, func(i int) {
		path, id := "/", fmt.Sprintf("retire-%d", i)
		if i%10 == 0 {
			path = "/slow"
		}
		at := time.Since(start)
		status := 0
		if resp, err := getWeb(client, listenPort, path, id); err == nil {
			status = resp.StatusCode
		}
		mu.Lock()
		defer mu.Unlock()
		statuses[status]++
		if path == "/slow" {
			sentAt[id] = at
		}
	})
	retiredAt := <-retired

	sent := 0
	for _, n := range statuses {
		sent += n
	}
	t.Logf("%d requests at %d/s, retired %s in: answers by status %v", sent, rate, retiredAt.Round(time.Millisecond), statuses)
	if statuses[http.StatusOK] != sent {
		t.Errorf("%d of %d requests got a 200 (by status, 0 for no answer: %v); retiring a route must not cut its traffic", statuses[http.StatusOK], sent, statuses)
	}
	// A slow request is hedged while the policy lives, and not once it is
	// retired (a second later: the push reaches Envoy in well under that).
	hedgedBefore, hedgedAfter, slowAfter := 0, 0, 0
	for id, at := range sentAt {
		attempts := up.Attempts(id)
		switch {
		case at < retiredAt && attempts > 1:
			hedgedBefore++
		case at > retiredAt+time.Second:
			slowAfter++
			if attempts > 1 {
				hedgedAfter++
			}
		}
	}
	t.Logf("slow requests hedged before the retirement: %d; after it: %d of %d", hedgedBefore, hedgedAfter, slowAfter)
	if hedgedBefore == 0 {
		t.Error("no slow request was hedged before the retirement: the test proves nothing about it")
	}
	if slowAfter == 0 || hedgedAfter > 0 {
		t.Errorf("%d of %d slow requests were hedged a second after the retirement; a retired route is unhedged", hedgedAfter, slowAfter)
	}
	harness.Eventually(t, retireAfter+10*time.Second, "the retired route to be removed", func() (bool, string) {
		resp, err := getWeb(client, listenPort, "/", "after-retirement")
		if err != nil {
			return false, err.Error()
		}
		return resp.StatusCode == http.StatusNotFound, fmt.Sprintf("status %d", resp.StatusCode)
	})
	if gone := time.Since(start) - retiredAt; gone < retireAfter {
		t.Errorf("the retired route was removed %s after the retirement, before RetireAfter (%s)", gone, retireAfter)
	}
}

// TestRetirementEnds: publishing the policy again ends its retirement, and
// so does another policy on the same Service port (Envoy routes a port by
// one policy); a route that is not held, or already retiring, is left alone;
// RetireAfter 0 removes at once.
func TestRetirementEnds(t *testing.T) {
	ctx := context.Background()
	const retireAfter = 200 * time.Millisecond
	s := NewServer(ServerOptions{Logger: logr.Discard(), RetireAfter: retireAfter})
	s.MarkSynced()
	web := testPlans(t)[0]
	web.Hedge = &plan.Hedge{Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"reset"}}
	key := keyOf(web)
	held := func(k k8stypes.NamespacedName) (plan.RoutePlan, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ok := s.plans[k]
		return p, ok
	}

	if err := s.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(ctx, key); err != nil {
		t.Fatal(err)
	}
	if p, ok := held(key); !ok || p.Hedge != nil {
		t.Fatalf("retired: held %v, hedge %+v; want the route, unhedged", ok, p.Hedge)
	}
	// A policy re-created (a GitOps prune and apply) is live again, for good.
	if err := s.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * retireAfter)
	if p, ok := held(key); !ok || p.Hedge == nil {
		t.Fatalf("published again during its retirement: held %v, hedge %+v; want the live route", ok, p.Hedge)
	}

	// Another policy on the same Service port takes it from a retired one.
	if err := s.Retire(ctx, key); err != nil {
		t.Fatal(err)
	}
	other := web.DeepCopy()
	other.Name = web.Namespace + "/other"
	if err := s.Publish(ctx, publish.Owner{}, other); err != nil {
		t.Fatalf("a new policy on a retired route's Service port: %v", err)
	}
	if _, ok := held(key); ok {
		t.Error("the retired route stayed beside the new policy on its Service port")
	}

	// Retiring what is not held does nothing; retiring again (the
	// reconciler does, while a target is gone) leaves the removal as it
	// was, so that a retirement ends.
	if err := s.Retire(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, ok := held(key); ok {
		t.Error("retiring a route that was not held published one")
	}
	otherKey := keyOf(other)
	if err := s.Retire(ctx, otherKey); err != nil {
		t.Fatal(err)
	}
	s.pubMu.Lock()
	first := s.retiring[otherKey]
	s.pubMu.Unlock()
	if err := s.Retire(ctx, otherKey); err != nil {
		t.Fatal(err)
	}
	s.pubMu.Lock()
	again := s.retiring[otherKey]
	s.pubMu.Unlock()
	if again != first {
		t.Errorf("retiring again started a new retirement (%d, was %d)", again, first)
	}
	harness.Eventually(t, 10*time.Second, "the retired route to go", func() (bool, string) { _, ok := held(otherKey); return !ok, "" })

	now := NewServer(ServerOptions{Logger: logr.Discard()})
	now.MarkSynced()
	if err := now.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	if err := now.Retire(ctx, key); err != nil {
		t.Fatal(err)
	}
	now.mu.Lock()
	_, stays := now.plans[key]
	now.mu.Unlock()
	if stays {
		t.Error("with RetireAfter 0 the route stayed")
	}
}
