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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/status"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

func testPlans(t *testing.T) []plan.RoutePlan {
	return harness.LoadPlanCase(t, filepath.Join("..", "envoyconf", "testdata", "in", "several-ports.yaml")).Plans
}

func keyOf(p plan.RoutePlan) k8stypes.NamespacedName { return publish.Owner{}.KeyOf(p) }

func TestServerWaitsForSync(t *testing.T) {
	ctx := context.Background()
	plans := testPlans(t)
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	if err := s.Publish(ctx, publish.Owner{}, plans[0]); err != nil {
		t.Fatal(err)
	}
	if s.Version() != "" {
		t.Fatal("snapshot before MarkSynced")
	}
	s.MarkSynced(keyOf(plans[0]), keyOf(plans[1]), k8stypes.NamespacedName{Namespace: "shop", Name: "gone"})
	if s.Version() != "" {
		t.Fatal("snapshot while expected policies are still missing")
	}
	if err := s.Publish(ctx, publish.Owner{}, plans[1]); err != nil {
		t.Fatal(err)
	}
	if s.Version() != "" {
		t.Fatal("snapshot while shop/gone is still missing")
	}
	// A policy that is removed counts as reconciled.
	if err := s.Remove(ctx, k8stypes.NamespacedName{Namespace: "shop", Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if s.Version() == "" || !s.Synced() {
		t.Fatal("no snapshot after every expected policy was reconciled")
	}
	if st := s.Status(keyOf(plans[0])); st.Version == "" || st.Connected != 0 {
		t.Errorf("status = %+v", st)
	}
}

// TestServerNeverServesAPartialFirstSnapshot is issue #12's defect 8: after a
// restart the server served whatever it had after 30s, and proxies that
// reconnected lost the virtual hosts of the policies not yet reconciled. It
// now waits for every policy, however long that takes, and a policy counts
// once it was reconciled, whatever the outcome.
func TestServerNeverServesAPartialFirstSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plans := testPlans(t)
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	slowKey := k8stypes.NamespacedName{Namespace: "shop", Name: "slow-to-reconcile"}
	s.MarkSynced(keyOf(plans[0]), slowKey)
	if err := s.Publish(ctx, publish.Owner{}, plans[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadyzCheck(nil); err == nil {
		t.Error("ready before the first snapshot")
	}
	time.Sleep(31 * time.Second) // past the old 30s sync timeout
	if v := s.Version(); v != "" {
		t.Fatalf("served version %s without shop/slow-to-reconcile", v)
	}
	s.Reconciled(slowKey)
	if s.Version() == "" || !s.Synced() {
		t.Fatal("no snapshot after every policy was reconciled")
	}
	if err := s.ReadyzCheck(nil); err != nil {
		t.Errorf("not ready after the first snapshot: %v", err)
	}
}

func TestServerKeepsLastGoodSet(t *testing.T) {
	ctx := context.Background()
	plans := testPlans(t)
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	s.MarkSynced()
	for _, p := range plans {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	v := s.Version()
	pushes := testutil.ToFloat64(pushesTotal)

	dup := plans[0]
	dup.Name = "shop/duplicate"
	if err := s.Publish(ctx, publish.Owner{}, dup); !errors.Is(err, plan.ErrDuplicateTarget) {
		t.Fatalf("conflicting plan: got %v", err)
	}
	if s.Version() != v || testutil.ToFloat64(pushesTotal) != pushes {
		t.Error("a failed publish changed the snapshot")
	}
	if st := s.Status(keyOf(dup)); st.Version != "" {
		t.Errorf("a rejected plan has status %+v", st)
	}
	// Same plans again: no new version, no push.
	if err := s.Publish(ctx, publish.Owner{}, plans[1]); err != nil || s.Version() != v || testutil.ToFloat64(pushesTotal) != pushes {
		t.Errorf("republishing an equal plan pushed (err %v)", err)
	}
	if err := s.Remove(ctx, keyOf(plans[0])); err != nil || s.Version() == v {
		t.Errorf("remove: err %v, version %s", err, s.Version())
	}
	if st := s.Status(keyOf(plans[0])); st.Version != "" {
		t.Errorf("removed plan has status %+v", st)
	}
	if err := s.Remove(ctx, keyOf(plans[0])); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}

// TestServerAckNack drives the callbacks the way go-control-plane does.
func TestServerAckNack(t *testing.T) {
	ctx := context.Background()
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	s.MarkSynced()
	p := testPlans(t)[0]
	if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
		t.Fatal(err)
	}
	v := s.Status(keyOf(p)).Version
	// Envoy answers each type with that type's version.
	tv := s.versions
	cb := callbacks{s}
	node := &corev3.Node{Id: "envoy-a"}
	if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	types := []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}
	for i, typ := range types {
		_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ})
		cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: tv[typ], Nonce: string(rune('1' + i))})
	}
	if st := s.Status(keyOf(p)); st.Connected != 1 || st.Programmed != 0 {
		t.Fatalf("before ACKs: %+v", st)
	}
	for i, typ := range types[:3] {
		_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: typ, VersionInfo: tv[typ], ResponseNonce: string(rune('1' + i))})
	}
	if st := s.Status(keyOf(p)); st.Programmed != 0 {
		t.Fatalf("programmed without the EDS ACK: %+v", st)
	}
	// A request answering an older nonce is neither ACK nor NACK.
	_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: types[3], VersionInfo: tv[types[3]], ResponseNonce: "0"})
	if st := s.Status(keyOf(p)); st.Programmed != 0 {
		t.Fatalf("a stale nonce counted as ACK: %+v", st)
	}
	_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: types[3], VersionInfo: tv[types[3]], ResponseNonce: "4"})
	if st := s.Status(keyOf(p)); st.Programmed != 1 || st.Rejected != "" || st.Version != v {
		t.Fatalf("after all ACKs: %+v", st)
	}

	// A new version, NACKed for RDS.
	p.Hedge.Delay += time.Millisecond
	if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
		t.Fatal(err)
	}
	v2, rv2 := s.Status(keyOf(p)).Version, s.versions[resourcev3.RouteType]
	if v2 == v {
		t.Fatalf("the policy's version did not move with its delay")
	}
	if s.versions[resourcev3.ClusterType] != tv[resourcev3.ClusterType] || rv2 == tv[resourcev3.RouteType] {
		t.Fatalf("a delay change moved the versions %v -> %v, want the routes' only", tv, s.versions)
	}
	cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.RouteType, VersionInfo: rv2, Nonce: "5"})
	nacks := testutil.ToFloat64(nacksTotal.WithLabelValues("RDS"))
	nack := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, VersionInfo: tv[resourcev3.RouteType], ResponseNonce: "5",
		ErrorDetail: &status.Status{Message: "bad regex"}}
	_ = cb.OnStreamRequest(1, nack)
	st := s.Status(keyOf(p))
	if st.Programmed != 0 || st.Rejected != "envoy-a rejected RDS: bad regex" || st.Version != v2 {
		t.Fatalf("after NACK: %+v", st)
	}
	if testutil.ToFloat64(nacksTotal.WithLabelValues("RDS")) != nacks+1 {
		t.Error("NACK not counted")
	}
	if nack.VersionInfo != rv2 {
		t.Errorf("the NACK should be marked as having seen %s so the cache waits for a new snapshot; has %q", rv2, nack.VersionInfo)
	}

	// #23, defect 6: any client of the xDS port can NACK, and its text went
	// into every policy's status as sent. A second client, with a node id and
	// a NACK of 100 KB holding newlines, a terminal escape and a
	// bidirectional override, gets a bounded, one-line message.
	hostile := "\x1b[31mRED\u202e\n" + strings.Repeat("x", 100<<10)
	if err := cb.OnStreamOpen(ctx, 3, ""); err != nil {
		t.Fatal(err)
	}
	_ = cb.OnStreamRequest(3, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a\nb" + hostile}, TypeUrl: resourcev3.RouteType})
	cb.OnStreamResponse(ctx, 3, nil, &discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.RouteType, VersionInfo: rv2, Nonce: "9"})
	_ = cb.OnStreamRequest(3, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, VersionInfo: tv[resourcev3.RouteType], ResponseNonce: "9",
		ErrorDetail: &status.Status{Message: hostile}})
	var rejections []string
	for _, st := range s.streams {
		for _, n := range st.nacked {
			rejections = append(rejections, st.node+" rejected: "+n.detail)
		}
	}
	for _, r := range rejections {
		if len(r) > maxNodeID+maxNackDetail+len(" rejected: ") || strings.ContainsAny(r, "\n\x1b\u202e") {
			t.Errorf("a NACK reached status as %d bytes (%q...); want at most %d, on one line, without control characters",
				len(r), r[:min(len(r), 80)], maxNodeID+maxNackDetail+len(" rejected: "))
		}
	}
	if len(rejections) != 2 {
		t.Errorf("%d rejections held, want 2 (one per client)", len(rejections))
	}
	cb.OnStreamClosed(3, nil)

	cb.OnStreamClosed(1, node)
	if st := s.Status(keyOf(p)); st.Connected != 0 || st.Programmed != 0 {
		t.Fatalf("after close: %+v", st)
	}
	if err := cb.OnDeltaStreamOpen(ctx, 2, ""); err == nil {
		t.Error("delta streams should be refused")
	}
}

// failingCache fails SetSnapshot a number of times, as a cache does when a
// stream stops reading and the call times out.
type failingCache struct {
	cachev3.SnapshotCache
	failures int
}

func (c *failingCache) SetSnapshot(ctx context.Context, node string, snap cachev3.ResourceSnapshot) error {
	if c.failures > 0 {
		c.failures--
		return errors.New("snapshot not set")
	}
	return c.SnapshotCache.SetSnapshot(ctx, node, snap)
}

// TestServerRetriesAFailedPush is issue #12's defect 6: the new version was
// recorded before SetSnapshot, so after a failed SetSnapshot the same plans
// looked published already and were never pushed.
func TestServerRetriesAFailedPush(t *testing.T) {
	ctx := context.Background()
	plans := testPlans(t)
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	fc := &failingCache{SnapshotCache: s.cache}
	s.cache = fc
	s.MarkSynced()
	fc.failures = 1
	if err := s.Publish(ctx, publish.Owner{}, plans[0]); err == nil {
		t.Fatal("Publish reported success although the snapshot was not set")
	}
	if err := s.Publish(ctx, publish.Owner{}, plans[0]); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	snap, err := fc.GetSnapshot(nodeGroup)
	if err != nil {
		t.Fatalf("the retry pushed nothing: %v", err)
	}
	if v := snap.GetVersion(resourcev3.RouteType); v != s.versions[resourcev3.RouteType] || v == "" || s.Version() == "" {
		t.Errorf("the cache serves routes version %q, the server reports %q", v, s.versions[resourcev3.RouteType])
	}
}

// TestStatusIsPerPolicy is issue #12's defect 3: one snapshot version stood for
// every policy, so a change to one made every policy Pending, and one policy's
// NACK marked them all Rejected. A proxy now serves a policy while the versions
// it acknowledged hold some version of that policy's own resources, and runs
// the current one when they hold the current; a NACK counts against the
// policies the rejected version changed.
func TestStatusIsPerPolicy(t *testing.T) {
	ctx := context.Background()
	plans := testPlans(t)
	web, other := plans[0], plans[len(plans)-1]
	if web.Name == other.Name {
		t.Fatal("the test case needs two policies")
	}
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	s.MarkSynced()
	for _, p := range []plan.RoutePlan{web, other} {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	cb := callbacks{s}
	if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	nonce := 0
	serve := func(typ string) string {
		nonce++
		n := strconv.Itoa(nonce)
		cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: s.versions[typ], Nonce: n})
		return n
	}
	ack := func(typ, n string) {
		_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: typ, VersionInfo: s.versions[typ], ResponseNonce: n})
	}
	types := []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}
	for _, typ := range types {
		ack(typ, serve(typ))
	}
	for _, p := range []plan.RoutePlan{web, other} {
		if st := s.Status(keyOf(p)); st.Programmed != 1 || st.Serving != 1 {
			t.Fatalf("%s after every ACK: %+v", p.Name, st)
		}
	}
	otherVersion := s.Status(keyOf(other)).Version

	// web's delay changes: only web is pending, and only its version moves.
	web.Hedge.Delay += time.Millisecond
	if err := s.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(keyOf(other)); st.Programmed != 1 || st.Serving != 1 || st.Version != otherVersion {
		t.Errorf("%s, untouched, after web's change: %+v, want still programmed at %s", other.Name, st, otherVersion)
	}
	if st := s.Status(keyOf(web)); st.Programmed != 0 || st.Serving != 1 {
		t.Errorf("web before the proxy took its change: %+v, want serving its previous version, not the current", st)
	}

	// The proxy rejects the new routes: web is rejected, the other is not.
	n := serve(resourcev3.RouteType)
	_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResponseNonce: n,
		ErrorDetail: &status.Status{Message: "bad regex"}})
	if st := s.Status(keyOf(web)); st.Rejected == "" {
		t.Errorf("web after the NACK: %+v, want rejected", st)
	}
	if st := s.Status(keyOf(other)); st.Rejected != "" || st.Programmed != 1 {
		t.Errorf("%s after a NACK of web's change: %+v, want programmed, not rejected", other.Name, st)
	}
}

// A policy that takes over a Service port from a deleted one gets the same
// clusters and endpoints (named after the Service port, not the policy): the
// versions of those types come back, or never change when the push loop
// folds the removal and the publish into one push, and the proxies have
// nothing new of them to acknowledge. The new policy must count as
// programmed once they run its routes. Found on kind: a policy created while
// the demo's held the port, then the demo's deleted, stayed "Pending: 0 of 2
// proxies run this policy" for as long as it was watched.
func TestAPolicyThatTakesOverAServicePortIsProgrammed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *Server
	}{
		{"each change pushed", func(*testing.T) *Server {
			s := NewServer(ServerOptions{Logger: logr.Discard()})
			s.MarkSynced()
			return s
		}},
		{"the removal and the publish in one push", startDebounced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			old := testPlans(t)[0]
			s := tc.start(t)
			cb := callbacks{s}
			if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
				t.Fatal(err)
			}
			nonce := 0
			takeAll := func() {
				for _, typ := range []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
					nonce++
					n := strconv.Itoa(nonce)
					cb.OnStreamResponse(ctx, 1, nil, &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: servedVersion(s, typ), Nonce: n})
					_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: typ, VersionInfo: servedVersion(s, typ), ResponseNonce: n})
				}
			}
			if err := s.Publish(ctx, publish.Owner{}, old); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 10*time.Second, "the old policy pushed", func() (bool, string) { return s.Status(keyOf(old)).Version != "", "" })
			takeAll()
			if st := s.Status(keyOf(old)); st.Programmed != 1 {
				t.Fatalf("%s after every ACK: %+v", old.Name, st)
			}
			clusters := servedVersion(s, resourcev3.ClusterType)

			successor := old.DeepCopy()
			ns, _, _ := strings.Cut(old.Name, "/")
			successor.Name = ns + "/successor"
			if err := s.Remove(ctx, keyOf(old)); err != nil {
				t.Fatal(err)
			}
			if err := s.Publish(ctx, publish.Owner{}, successor); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 10*time.Second, "the successor pushed", func() (bool, string) { return s.Status(keyOf(successor)).Version != "", "" })
			if v := servedVersion(s, resourcev3.ClusterType); v != clusters {
				t.Fatalf("the successor's clusters are version %s, the old policy's %s: the case needs identical clusters", v, clusters)
			}
			takeAll()
			if st := s.Status(keyOf(successor)); st.Programmed != 1 || st.Serving != 1 {
				t.Errorf("the successor once the proxy runs its routes: %+v, want programmed", st)
			}
		})
	}
}

// servedVersion is the version of a type in the server's current snapshot.
func servedVersion(s *Server, typ string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[typ]
}

// TestEventsOnlyForChangedPolicies: every push or ACK sent an event for every
// policy, so one policy's change woke the reconciles of all of them. Only the
// policies whose status moved get one.
func TestEventsOnlyForChangedPolicies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plans := testPlans(t)
	web, other := plans[0], plans[len(plans)-1]
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	s.MarkSynced()
	go s.notifyLoop(ctx)
	received := func() map[string]int {
		got := map[string]int{}
		deadline := time.After(3 * notifyHoldOff)
		for {
			select {
			case ev := <-s.Events():
				got[ev.Object.GetNamespace()+"/"+ev.Object.GetName()]++
			case <-deadline:
				return got
			}
		}
	}
	for _, p := range []plan.RoutePlan{web, other} {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := received(); got[web.Name] != 1 || got[other.Name] != 1 {
		t.Fatalf("after publishing both: events %v, want one each", got)
	}
	web.Hedge.Delay += time.Millisecond
	if err := s.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	if got := received(); got[web.Name] != 1 || got[other.Name] != 0 {
		t.Errorf("after web's delay changed: events %v, want one for %s and none for %s", got, web.Name, other.Name)
	}
	// A proxy connecting changes what both report.
	if err := (callbacks{s}).OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := received(); got[web.Name] != 1 || got[other.Name] != 1 {
		t.Errorf("after a proxy connected: events %v, want one each", got)
	}
}

// TestReconnectedProxyIsProgrammed: a proxy that reconnects (to a restarted
// operator) names the versions it runs in its first requests; when they are
// current the cache sends nothing, so there is no response to ACK. Such a
// proxy stayed unprogrammed for good: 0 of 100 policies Programmed two
// minutes after a restart in make bench-scale.
func TestReconnectedProxyIsProgrammed(t *testing.T) {
	ctx := context.Background()
	s := NewServer(ServerOptions{Logger: logr.Discard()})
	s.MarkSynced()
	p := testPlans(t)[0]
	if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
		t.Fatal(err)
	}
	cb := callbacks{s}
	if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType} {
		_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: typ, VersionInfo: s.versions[typ]})
	}
	if st := s.Status(keyOf(p)); st.Programmed != 1 {
		t.Errorf("a proxy that reconnected with the current versions: %+v, want programmed", st)
	}
	// One that names a version this server never served is not.
	if err := cb.OnStreamOpen(ctx, 2, ""); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType} {
		_ = cb.OnStreamRequest(2, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-b"}, TypeUrl: typ, VersionInfo: "0123456789abcdef"})
	}
	if st := s.Status(keyOf(p)); st.Programmed != 1 || st.Connected != 2 {
		t.Errorf("with a second proxy on unknown versions: %+v, want 1 of 2 programmed", st)
	}

	// A restarted operator accepts streams before its first publish: the
	// proxy names versions the new server learns only when it publishes the
	// same content again.
	again := NewServer(ServerOptions{Logger: logr.Discard()})
	cb = callbacks{again}
	if err := cb.OnStreamOpen(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType} {
		_ = cb.OnStreamRequest(1, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: typ, VersionInfo: s.versions[typ]})
	}
	again.MarkSynced()
	if err := again.Publish(ctx, publish.Owner{}, p); err != nil {
		t.Fatal(err)
	}
	if st := again.Status(keyOf(p)); st.Programmed != 1 {
		t.Errorf("a proxy that reconnected before the first publish: %+v, want programmed", st)
	}
}
