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
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// MarkSynced allows the server to serve snapshots. Until then Publish and Remove
// only collect plans: a snapshot built before the manager's caches synced and
// the policies were reconciled would be empty, and serving it would wipe the
// routes of every proxy that reconnects to a restarted operator.
//
// The first snapshot is built once every expected key was published, removed
// or reported Reconciled, however long that takes: a partial first snapshot
// would drop the routes of the policies still missing. With no keys it is
// built at once. Later calls do nothing. InitialSync calls this with the keys
// of every HedgePolicy that publishes via XDS.
func (s *Server) MarkSynced(expected ...k8stypes.NamespacedName) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.syncRequested {
		return
	}
	s.syncRequested = true
	for _, k := range expected {
		if !s.seen[k] {
			s.pending[k] = true
		}
	}
	if len(s.pending) == 0 {
		s.finishSyncLocked()
		return
	}
	s.log.Info("waiting for the first reconcile of every policy before serving xDS", "policies", len(s.pending))
}

// Reconciled records that the policy was reconciled, whatever the outcome
// (publish.SyncWaiter): a policy that cannot be published must not keep the
// others from being served.
func (s *Server) Reconciled(key k8stypes.NamespacedName) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.seenLocked(key)
}

// finishSyncLocked publishes the first snapshot. Callers hold pubMu.
func (s *Server) finishSyncLocked() {
	s.mu.Lock()
	s.synced = true
	plans := maps.Clone(s.plans)
	s.mu.Unlock()
	if err := s.applyLocked(context.Background(), plans); err != nil {
		s.log.Error(err, "publishing the first snapshot")
	}
}

// ReadyzCheck is a healthz.Checker for the manager's readyz: a replica is not
// ready until it serves a complete first snapshot, so no proxy is pointed at a
// replica that would give it an empty one.
func (s *Server) ReadyzCheck(_ *http.Request) error {
	if s.Version() == "" {
		return errors.New("the xDS server has not served its first complete snapshot yet")
	}
	return nil
}

// Synced reports whether the server serves snapshots.
func (s *Server) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Publish makes p the plan of its policy. A plan that cannot be served (it
// does not validate, or another policy holds its Service port) is refused
// with the error, and nothing changes. Without the push loop, the set is
// translated and pushed before Publish returns. While the push loop runs
// (PushDebounce), Publish checks the plan alone and the loop translates the
// set once per push: translating the whole set on every publish, under one
// lock, made a 1,000-policy apply 1,000 translations of a growing set and
// kept the reconcile workers waiting on each other.
//
// A live policy's plan ends the retirement (Retire) of its own route, and of
// any retired route on the same Service port.
func (s *Server) Publish(ctx context.Context, owner publish.Owner, p plan.RoutePlan) error {
	key := owner.KeyOf(p)
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if err := s.endRetirementsLocked(ctx, key, p); err != nil {
		return err
	}
	return s.publishLocked(ctx, key, p)
}

// publishLocked is Publish without the retirements. Callers hold pubMu.
func (s *Server) publishLocked(ctx context.Context, key k8stypes.NamespacedName, p plan.RoutePlan) error {
	// Most reconciles change nothing (a sample that left the delay where it
	// was, a status write); assembling and hashing every policy's resources
	// for them made a reconcile O(N), and 0.43 cores busy at rest with 1,000
	// policies. s.plans holds only what was applied, so a plan whose push
	// failed is applied again.
	if s.translator.Pure() && s.holds(key, p) {
		s.seenLocked(key)
		return nil
	}
	if s.deferring() {
		if err := s.admitLocked(key, p); err != nil {
			return fmt.Errorf("xds: publishing %s: %w", key, err)
		}
		s.mu.Lock()
		s.plans[key] = p.DeepCopy()
		s.stale = true
		s.mu.Unlock()
		s.kickPush()
		s.seenLocked(key)
		return nil
	}
	next := s.planSet()
	next[key] = p.DeepCopy()
	if err := s.applyLocked(ctx, next); err != nil {
		return fmt.Errorf("xds: publishing %s: %w", key, err)
	}
	s.seenLocked(key)
	return nil
}

// Remove withdraws the policy's plan.
func (s *Server) Remove(ctx context.Context, key k8stypes.NamespacedName) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	delete(s.retiring, key)
	return s.removeLocked(ctx, key)
}

// removeLocked is Remove. Callers hold pubMu.
func (s *Server) removeLocked(ctx context.Context, key k8stypes.NamespacedName) error {
	s.mu.Lock()
	_, held := s.plans[key]
	deferring := s.pushing
	if held && deferring {
		delete(s.plans, key)
		s.stale = true
	}
	s.mu.Unlock()
	switch {
	case !held:
	case deferring:
		s.kickPush()
	default:
		next := s.planSet()
		delete(next, key)
		if err := s.applyLocked(ctx, next); err != nil {
			return fmt.Errorf("xds: removing %s: %w", key, err)
		}
	}
	s.seenLocked(key)
	return nil
}

// deferring says whether the push loop translates and pushes the set.
func (s *Server) deferring() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushing
}

// admitLocked checks a plan (valid: plan.Build) alone as the set's
// translation would: its resources validate, and no other plan holds its
// Service port. Its resources are kept for the next translation. Callers
// hold pubMu.
func (s *Server) admitLocked(key k8stypes.NamespacedName, p plan.RoutePlan) error {
	s.mu.Lock()
	for other, q := range s.plans {
		if other != key && q.Namespace == p.Namespace && q.Service == p.Service && q.Port == p.Port {
			s.mu.Unlock()
			return fmt.Errorf("%w: %s and %s both target %s/%s port %d", plan.ErrDuplicateTarget, q.Name, p.Name, p.Namespace, p.Service, p.Port)
		}
	}
	s.mu.Unlock()
	return s.translator.Admit(p)
}

// holds says whether p is already the applied plan of its policy.
func (s *Server) holds(key k8stypes.NamespacedName, p plan.RoutePlan) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.plans[key]
	return ok && reflect.DeepEqual(cur, p)
}

func (s *Server) planSet() map[k8stypes.NamespacedName]plan.RoutePlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.plans)
}

// seenLocked records the first reconcile of a policy for MarkSynced.
func (s *Server) seenLocked(key k8stypes.NamespacedName) {
	s.seen[key] = true
	if !s.syncRequested || !s.pending[key] {
		return
	}
	delete(s.pending, key)
	if len(s.pending) == 0 && !s.Synced() {
		s.finishSyncLocked()
	}
}

// applyLocked translates the plan set and, once synced, hands a snapshot with
// a new version to the cache. On error nothing changes. Callers hold pubMu.
func (s *Server) applyLocked(ctx context.Context, next map[k8stypes.NamespacedName]plan.RoutePlan) error {
	prepared, err := s.prepareLocked(next)
	if err != nil {
		return err
	}
	s.mu.Lock()
	push := s.synced && prepared.version != s.version
	if !push {
		s.plans = next
	}
	s.mu.Unlock()
	if !push {
		return nil
	}
	return s.push(ctx, prepared)
}

// prepareLocked translates the plan set into a snapshot. Callers hold pubMu.
func (s *Server) prepareLocked(next map[k8stypes.NamespacedName]plan.RoutePlan) (*preparedSnapshot, error) {
	res, err := s.translator.Translate(slices.Collect(maps.Values(next)))
	if err != nil {
		return nil, err
	}
	version, versions := res.Version(), res.TypeVersions()
	hashes := make(map[k8stypes.NamespacedName]envoyconf.PolicyHash, len(next))
	for key, p := range next {
		hashes[key], _ = res.PolicyHash(p.Name)
	}
	snap := &cachev3.Snapshot{}
	snap.Resources[types.Listener] = cachev3.NewResources(versions[resourcev3.ListenerType], toResources(res.Listeners))
	snap.Resources[types.Route] = cachev3.NewResources(versions[resourcev3.RouteType], toResources(res.Routes))
	snap.Resources[types.Cluster] = cachev3.NewResources(versions[resourcev3.ClusterType], toResources(res.Clusters))
	snap.Resources[types.Endpoint] = cachev3.NewResources(versions[resourcev3.EndpointType], toResources(res.Endpoints))
	if err := snap.Consistent(); err != nil {
		return nil, err
	}
	return &preparedSnapshot{snap: snap, plans: next, version: version, versions: versions, hashes: hashes}, nil
}

// push hands a prepared snapshot to the cache. Only a snapshot the cache took
// becomes the server's version: after a failure, the same plans are pushed
// again.
func (s *Server) push(ctx context.Context, p *preparedSnapshot) error {
	// The cache answers open watches from this call; bound it in case a
	// stream stops reading.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.cache.SetSnapshot(ctx, nodeGroup, p.snap); err != nil {
		return err
	}
	s.mu.Lock()
	s.plans = p.plans
	s.version = p.version
	s.versions = p.versions
	s.policies = p.hashes
	s.remember(p.versions, p.hashes)
	s.acceptClaims()
	s.mu.Unlock()
	pushesTotal.Inc()
	s.log.Info("published xDS snapshot", "version", p.version, "policies", len(p.plans))
	s.notify()
	return nil
}

// preparedSnapshot is a translated plan set, ready to push.
type preparedSnapshot struct {
	snap     *cachev3.Snapshot
	plans    map[k8stypes.NamespacedName]plan.RoutePlan
	version  string
	versions map[string]string
	hashes   map[k8stypes.NamespacedName]envoyconf.PolicyHash
}

func toResources[M types.Resource](in []M) []types.Resource {
	out := make([]types.Resource, 0, len(in))
	for _, m := range in {
		out = append(out, m)
	}
	return out
}

// Version is the version of the snapshot being served ("" before MarkSynced).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}
