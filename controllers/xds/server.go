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
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// Defaults of ServerOptions.
const (
	DefaultXDSAddress  = ":18000"
	DefaultSyncTimeout = 30 * time.Second
)

// nodeGroup is the one snapshot-cache key: every proxy gets the same
// configuration, including proxies that connect later.
const nodeGroup = "tailcut"

// notifyHoldOff coalesces a burst of ACKs (one per resource type and proxy)
// into one round of events.
const notifyHoldOff = 100 * time.Millisecond

// ServerOptions configure the xDS server.
type ServerOptions struct {
	// Address is where the ADS gRPC server listens. Default ":18000"; tests use
	// "127.0.0.1:0".
	Address string
	// Translate places the HTTP listener that proxies get.
	Translate TranslateOptions
	// SyncTimeout bounds the wait for the policies named in MarkSynced. Default 30s.
	SyncTimeout time.Duration
	// Logger defaults to controller-runtime's logger named "xds".
	Logger logr.Logger
}

// Server is tailcut's xDS server and its publish.Publisher. It keeps the
// current plan of every policy, serves them all as one snapshot over ADS (SotW
// gRPC) and tracks which proxies acknowledged which version.
//
// Wiring (main.go):
//
//	srv := xds.NewServer(xds.ServerOptions{Address: ":18000"})
//	mgr.Add(srv)                    // serves xDS on every replica
//	mgr.Add(srv.InitialSync(mgr))   // MarkSynced once the first reconciles are in
//	reconciler.Publishers[tailcutv1alpha1.PublishXDS] = srv
//	// in SetupWithManager: re-evaluate policies when proxies ACK or NACK
//	WatchesRawSource(source.Channel(srv.Events(), &handler.EnqueueRequestForObject{}))
type Server struct {
	opts  ServerOptions
	log   logr.Logger
	cache cachev3.SnapshotCache

	// pubMu serializes changes to the plan set and snapshot.
	pubMu         sync.Mutex
	syncRequested bool
	pending       map[k8stypes.NamespacedName]bool
	seen          map[k8stypes.NamespacedName]bool
	syncTimer     *time.Timer

	// mu guards what the gRPC callbacks and Status read.
	mu       sync.Mutex
	plans    map[k8stypes.NamespacedName]plan.RoutePlan
	synced   bool
	version  string   // version in the cache; "" before the first snapshot
	expected []string // type URLs a proxy must ACK to run version
	streams  map[int64]*streamState

	lisMu sync.Mutex
	lis   net.Listener

	events chan event.GenericEvent
	dirty  chan struct{}

	// mutate, when set by a test, edits the translated resources before they
	// are validated and published.
	mutate func(*Resources)
}

// streamState is one proxy's ADS stream.
type streamState struct {
	node   string
	sent   map[string]sentResponse // by type URL: the last response sent
	acked  map[string]string       // by type URL: the last version ACKed
	nacked map[string]rejection    // by type URL: the last NACK, until an ACK
}

type sentResponse struct{ nonce, version string }

type rejection struct{ version, detail string }

var (
	_ publish.Publisher              = (*Server)(nil)
	_ manager.Runnable               = (*Server)(nil)
	_ manager.LeaderElectionRunnable = (*Server)(nil)
)

// NewServer returns a server that serves nothing until MarkSynced.
func NewServer(opts ServerOptions) *Server {
	if opts.Address == "" {
		opts.Address = DefaultXDSAddress
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = ctrl.Log.WithName("xds")
	}
	opts.Translate = opts.Translate.withDefaults()
	return &Server{
		opts:    opts,
		log:     opts.Logger,
		cache:   cachev3.NewSnapshotCache(true, groupHash{}, logAdapter{opts.Logger}),
		pending: map[k8stypes.NamespacedName]bool{},
		seen:    map[k8stypes.NamespacedName]bool{},
		plans:   map[k8stypes.NamespacedName]plan.RoutePlan{},
		streams: map[int64]*streamState{},
		events:  make(chan event.GenericEvent, 256),
		dirty:   make(chan struct{}, 1),
	}
}

// groupHash maps every proxy to nodeGroup.
type groupHash struct{}

func (groupHash) ID(*corev3.Node) string { return nodeGroup }

// NeedLeaderElection is false: every replica serves xDS.
func (s *Server) NeedLeaderElection() bool { return false }

// Listen binds the server's address, if not yet bound, and returns it. Start
// calls it; tests call it first to learn the port of "127.0.0.1:0".
func (s *Server) Listen() (net.Addr, error) {
	s.lisMu.Lock()
	defer s.lisMu.Unlock()
	if s.lis == nil {
		lis, err := net.Listen("tcp", s.opts.Address)
		if err != nil {
			return nil, fmt.Errorf("xds: listening on %s: %w", s.opts.Address, err)
		}
		s.lis = lis
	}
	return s.lis.Addr(), nil
}

// Start serves ADS until ctx ends (manager.Runnable).
func (s *Server) Start(ctx context.Context) error {
	addr, err := s.Listen()
	if err != nil {
		return err
	}
	g := grpc.NewServer(
		// Envoy pings every 30s (see the bootstrap); gRPC's default policy would
		// answer pings more often than every 5 minutes with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
	)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, s.cache, callbacks{s}))
	go s.notifyLoop(ctx)

	served := make(chan error, 1)
	go func() { served <- g.Serve(s.lis) }()
	s.log.Info("serving xDS", "address", addr.String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
	return nil
}

// MarkSynced allows the server to serve snapshots. Until then Publish and Remove
// only collect plans: a snapshot built before the manager's caches synced and
// the policies were reconciled would be empty, and serving it would wipe the
// routes of every proxy that reconnects to a restarted operator.
//
// The first snapshot is built once every expected key was published or removed,
// or after ServerOptions.SyncTimeout, whichever comes first. With no keys it is
// built at once. Later calls do nothing. InitialSync calls this with the keys of
// every HedgePolicy that publishes via XDS.
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
	s.log.Info("waiting for the first reconcile of policies before serving xDS", "policies", len(s.pending))
	s.syncTimer = time.AfterFunc(s.opts.SyncTimeout, func() {
		s.pubMu.Lock()
		defer s.pubMu.Unlock()
		s.mu.Lock()
		synced := s.synced
		s.mu.Unlock()
		if synced {
			return
		}
		s.log.Info("sync timeout: serving xDS without the plans of some policies", "missing", slices.Collect(maps.Keys(s.pending)))
		s.finishSyncLocked()
	})
}

// finishSyncLocked publishes the first snapshot. Callers hold pubMu.
func (s *Server) finishSyncLocked() {
	if s.syncTimer != nil {
		s.syncTimer.Stop()
	}
	s.mu.Lock()
	s.synced = true
	plans := maps.Clone(s.plans)
	s.mu.Unlock()
	if err := s.applyLocked(context.Background(), plans); err != nil {
		s.log.Error(err, "publishing the first snapshot")
	}
}

// Synced reports whether the server serves snapshots.
func (s *Server) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Publish makes p the plan of its policy and publishes the new set. When the
// set does not translate, nothing changes and the error is returned.
func (s *Server) Publish(ctx context.Context, owner *tailcutv1alpha1.HedgePolicy, p plan.RoutePlan) error {
	key := planKey(owner, p)
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	next := s.planSet()
	next[key] = p
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
	next := s.planSet()
	if _, ok := next[key]; ok {
		delete(next, key)
		if err := s.applyLocked(ctx, next); err != nil {
			return fmt.Errorf("xds: removing %s: %w", key, err)
		}
	}
	s.seenLocked(key)
	return nil
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

func planKey(owner *tailcutv1alpha1.HedgePolicy, p plan.RoutePlan) k8stypes.NamespacedName {
	if owner != nil {
		return k8stypes.NamespacedName{Namespace: owner.Namespace, Name: owner.Name}
	}
	ns, name, _ := strings.Cut(p.Name, "/")
	return k8stypes.NamespacedName{Namespace: ns, Name: name}
}

// applyLocked translates the plan set and, once synced, hands a snapshot with
// a new version to the cache. On error nothing changes. Callers hold pubMu.
func (s *Server) applyLocked(ctx context.Context, next map[k8stypes.NamespacedName]plan.RoutePlan) error {
	res, err := Translate(slices.Collect(maps.Values(next)), s.opts.Translate)
	if err != nil {
		return err
	}
	if s.mutate != nil {
		s.mutate(res)
		if err := res.Validate(); err != nil {
			return err
		}
	}
	version, err := res.Version()
	if err != nil {
		return err
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: toResources(res.Listeners),
		resourcev3.RouteType:    toResources(res.Routes),
		resourcev3.ClusterType:  toResources(res.Clusters),
		resourcev3.EndpointType: toResources(res.Endpoints),
	})
	if err != nil {
		return err
	}
	if err := snap.Consistent(); err != nil {
		return err
	}

	s.mu.Lock()
	s.plans = next
	push := s.synced && version != s.version
	if push {
		s.version = version
		s.expected = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType}
		if len(res.Clusters) > 0 {
			s.expected = append(s.expected, resourcev3.EndpointType)
		}
	}
	s.mu.Unlock()
	if !push {
		return nil
	}
	// The cache answers open watches from this call; bound it in case a
	// stream stops reading.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.cache.SetSnapshot(ctx, nodeGroup, snap); err != nil {
		return err
	}
	pushesTotal.Inc()
	s.log.Info("published xDS snapshot", "version", version, "policies", len(next))
	s.notify()
	return nil
}

func toResources[M types.Resource](in []M) []types.Resource {
	out := make([]types.Resource, 0, len(in))
	for _, m := range in {
		out = append(out, m)
	}
	return out
}

// Status reports how far connected proxies took the current snapshot. All
// policies share one snapshot, so the version and counts are the same for every
// policy the server holds; a policy it does not hold gets Connected only.
//
// A proxy is Programmed when it ACKed the current version for every resource
// type of the snapshot. Rejected holds the first (by node id) NACK of the
// current version, as "<node> rejected <type>: <Envoy's error detail>".
func (s *Server) Status(key k8stypes.NamespacedName) publish.ProgramStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := publish.ProgramStatus{Connected: int32(len(s.streams))}
	if _, ok := s.plans[key]; !ok || s.version == "" {
		return ps
	}
	ps.Version = s.version
	var rejected []string
	for _, st := range s.streams {
		programmed := true
		for _, typ := range s.expected {
			if st.acked[typ] != s.version {
				programmed = false
			}
		}
		if programmed {
			ps.Programmed++
		}
		for _, typ := range slices.Sorted(maps.Keys(st.nacked)) {
			if n := st.nacked[typ]; n.version == s.version {
				rejected = append(rejected, fmt.Sprintf("%s rejected %s: %s", st.node, shortType(typ), n.detail))
			}
		}
	}
	if len(rejected) > 0 {
		slices.Sort(rejected)
		ps.Rejected = rejected[0]
	}
	return ps
}

// Version is the version of the snapshot being served ("" before MarkSynced).
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Events delivers a GenericEvent for every policy the server holds whenever
// what Status reports may have changed: a proxy connected or left, ACKed or
// NACKed, or a new version was published. Bursts are coalesced (100ms). Feed it
// to the HedgePolicy controller with
//
//	WatchesRawSource(source.Channel(srv.Events(), &handler.EnqueueRequestForObject{}))
//
// so the Programmed condition follows the proxies without waiting for the next
// evaluation. Events flow only while Start runs.
func (s *Server) Events() <-chan event.GenericEvent { return s.events }

func (s *Server) notify() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *Server) notifyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(notifyHoldOff):
		}
		s.mu.Lock()
		keys := slices.SortedFunc(maps.Keys(s.plans), func(a, b k8stypes.NamespacedName) int {
			return strings.Compare(a.String(), b.String())
		})
		s.mu.Unlock()
		for _, k := range keys {
			ev := event.GenericEvent{Object: &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
			select {
			case s.events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// callbacks track streams, ACKs and NACKs. go-control-plane calls them from
// each stream's goroutine.
type callbacks struct{ s *Server }

func (c callbacks) OnStreamOpen(_ context.Context, id int64, _ string) error {
	c.s.mu.Lock()
	c.s.streams[id] = &streamState{sent: map[string]sentResponse{}, acked: map[string]string{}, nacked: map[string]rejection{}}
	c.s.mu.Unlock()
	connectedProxies.Inc()
	c.s.notify()
	return nil
}

func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node) {
	c.s.mu.Lock()
	_, ok := c.s.streams[id]
	delete(c.s.streams, id)
	c.s.mu.Unlock()
	if ok {
		connectedProxies.Dec()
	}
	c.s.notify()
}

// OnStreamRequest reads ACKs and NACKs: a request answering the last response
// of its type (same nonce) ACKs that response's version, or NACKs it when it
// carries an error detail.
func (c callbacks) OnStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return nil
	}
	if st.node == "" && req.GetNode() != nil {
		st.node = req.GetNode().GetId()
		s.checkNode(req.GetNode())
	}
	typ := req.GetTypeUrl()
	last, ok := st.sent[typ]
	if !ok || req.GetResponseNonce() != last.nonce {
		return nil // a first request, or one answering an older response
	}
	if detail := req.GetErrorDetail(); detail != nil {
		st.nacked[typ] = rejection{version: last.version, detail: detail.GetMessage()}
		nacksTotal.WithLabelValues(shortType(typ)).Inc()
		s.log.Info("proxy rejected xDS update", "node", st.node, "type", shortType(typ), "version", last.version, "error", detail.GetMessage())
		// Envoy NACKs with the version it still runs. The snapshot cache
		// would answer that with the rejected version at once, and again after
		// every NACK; marking the rejected version as seen makes it wait for the
		// next snapshot instead.
		req.VersionInfo = last.version
		s.notify()
		return nil
	}
	if st.acked[typ] != req.GetVersionInfo() || st.nacked[typ] != (rejection{}) {
		st.acked[typ] = req.GetVersionInfo()
		delete(st.nacked, typ)
		s.notify()
	}
	return nil
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if st := c.s.streams[id]; st != nil {
		st.sent[resp.GetTypeUrl()] = sentResponse{nonce: resp.GetNonce(), version: resp.GetVersionInfo()}
	}
}

// Delta xDS is refused: ACK tracking reads SotW requests only, and the
// bootstrap asks for SotW (api_type GRPC).
func (callbacks) OnDeltaStreamOpen(context.Context, int64, string) error {
	return errors.New("tailcut serves state-of-the-world ADS only; set ads_config.api_type to GRPC")
}

// The remaining callbacks have nothing to track.

func (callbacks) OnDeltaStreamClosed(int64, *corev3.Node) {}

func (callbacks) OnStreamDeltaRequest(int64, *discoveryv3.DeltaDiscoveryRequest) error { return nil }

func (callbacks) OnStreamDeltaResponse(int64, *discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse) {
}

func (callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

func (callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}

// checkNode warns when a proxy's bootstrap expected another listener port.
// Callers hold mu.
func (s *Server) checkNode(n *corev3.Node) {
	v, ok := n.GetMetadata().GetFields()[ListenerPortMetadataKey]
	if !ok {
		return
	}
	if want := s.opts.Translate.ListenerPort; uint32(v.GetNumberValue()) != want {
		s.log.Info("proxy bootstrap expects another listener port; check --listener-port and the Service ports",
			"node", n.GetId(), "bootstrap", v.GetNumberValue(), "programmed", want)
	}
}

// logAdapter hands go-control-plane's logging to logr; its routine messages go
// to debug verbosity.
type logAdapter struct{ l logr.Logger }

func (a logAdapter) Debugf(f string, args ...any) { a.l.V(2).Info(fmt.Sprintf(f, args...)) }
func (a logAdapter) Infof(f string, args ...any)  { a.l.V(1).Info(fmt.Sprintf(f, args...)) }
func (a logAdapter) Warnf(f string, args ...any)  { a.l.V(1).Info(fmt.Sprintf(f, args...)) }
func (a logAdapter) Errorf(f string, args ...any) { a.l.Error(nil, fmt.Sprintf(f, args...)) }
