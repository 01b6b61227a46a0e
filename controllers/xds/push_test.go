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
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

// TestPushesAreDebounced: 100 policies published back to back reach the cache
// in a few pushes, not 100 (1,000 policies applied at once took 35 s to reach
// Envoy, which re-read up to 2,000 clusters on every push), and each is
// served once the changes pause.
func TestPushesAreDebounced(t *testing.T) {
	ctx := context.Background()
	s := startDebounced(t)

	before := testutil.ToFloat64(pushesTotal)
	plans := harness.ManyPlans(t, 100)
	start := time.Now()
	for _, p := range plans {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	publishing := time.Since(start)
	harness.Eventually(t, 10*time.Second, "every policy served", func() (bool, string) {
		for _, p := range plans {
			if s.Status(keyOf(p)).Version == "" {
				return false, p.Name + " has no version"
			}
		}
		return true, ""
	})
	// One push, and one more per maxPushDelay that publishing took; a loaded
	// machine may pause longer than PushDebounce once or twice.
	allowed := 3 + int(publishing/maxPushDelay)
	if pushes := int(testutil.ToFloat64(pushesTotal) - before); pushes < 1 || pushes > allowed {
		t.Errorf("%d pushes for 100 policies published back to back in %s, want 1 to %d", pushes, publishing, allowed)
	}

	// A change that is undone before the push is not pushed at all.
	served := s.Version()
	before = testutil.ToFloat64(pushesTotal)
	changed := plans[3].DeepCopy()
	changed.Hedge.Delay += time.Millisecond
	if err := s.Publish(ctx, publish.Owner{}, changed); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, publish.Owner{}, plans[3]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * 200 * time.Millisecond)
	if got := testutil.ToFloat64(pushesTotal) - before; got != 0 || s.Version() != served {
		t.Errorf("a change undone before its push: %v pushes, version %s -> %s; want none", got, served, s.Version())
	}
}

// startDebounced runs a server with a 200ms push debounce until the test
// ends, synced with no policy and serving its first, empty snapshot.
func startDebounced(t *testing.T) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := NewServer(ServerOptions{Address: "127.0.0.1:0", Logger: logr.Discard(), PushDebounce: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	harness.Eventually(t, 10*time.Second, "the push loop", func() (bool, string) { s.mu.Lock(); defer s.mu.Unlock(); return s.pushing, "" })
	s.MarkSynced()
	harness.Eventually(t, 10*time.Second, "the first, empty snapshot", func() (bool, string) { return s.Version() != "", "" })
	return s
}

// TestDeferredPublishTranslatesEachPlanOnce: while the push loop runs,
// Publish translates only its own plan and the loop assembles the set once
// per push. Each publish assembling the whole set under one lock made a
// 1,000-policy apply take 18 to 29 s, the reconcile workers waiting on each
// other. A plan that cannot be served beside the others (a second one on a
// Service port) is still refused by Publish itself.
func TestDeferredPublishTranslatesEachPlanOnce(t *testing.T) {
	ctx := context.Background()
	s := startDebounced(t)

	plans := harness.ManyPlans(t, 100)
	translations, assemblies, pushes := testutil.ToFloat64(translationsTotal), testutil.ToFloat64(assembliesTotal), testutil.ToFloat64(pushesTotal)
	for _, p := range plans {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 10*time.Second, "every policy served", func() (bool, string) {
		for _, p := range plans {
			if s.Status(keyOf(p)).Version == "" {
				return false, p.Name + " has no version"
			}
		}
		return true, ""
	})
	if got := testutil.ToFloat64(translationsTotal) - translations; got != 100 {
		t.Errorf("%v policy translations for 100 new plans, want 100 (each once)", got)
	}
	gotPushes := testutil.ToFloat64(pushesTotal) - pushes
	if got := testutil.ToFloat64(assembliesTotal) - assemblies; got > gotPushes {
		t.Errorf("the set was assembled %v times for %v pushes of 100 published plans, want at most one per push", got, gotPushes)
	}

	dup := plans[7].DeepCopy()
	dup.Name = dup.Namespace + "/another"
	if err := s.Publish(ctx, publish.Owner{}, dup); !errors.Is(err, plan.ErrDuplicateTarget) {
		t.Errorf("a second plan on one Service port: %v, want ErrDuplicateTarget", err)
	}
	if got := s.Status(keyOf(plans[7])).Version; got == "" {
		t.Error("a refused plan withdrew the served one")
	}
}
