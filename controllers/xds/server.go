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
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// Defaults of ServerOptions.
const (
	DefaultXDSAddress = ":18000"
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
	// TLS, when set, serves xDS over TLS (ServerTLS: mutual, every client
	// needs a certificate).
	TLS *tls.Config
	// Translate places the HTTP listener that proxies get.
	Translate envoyconf.TranslateOptions
	// Logger defaults to controller-runtime's logger named "xds".
	Logger logr.Logger
	// PushDebounce, when set, batches pushes while Start runs: a snapshot
	// goes to the proxies once changes pause for this long, or after
	// maxPushDelay at the latest (Istio debounces 100ms). Every push sends a
	// proxy every resource of a type (SotW), so 1,000 policies applied at
	// once meant hundreds of pushes of up to 2,000 clusters each. Zero
	// pushes from Publish itself.
	PushDebounce time.Duration
	// RetireAfter is how long the route of a deleted policy stays,
	// unhedged, before it is removed (Retire). Zero removes it at once.
	RetireAfter time.Duration
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
	// retiring holds the retired routes (Retire) and the generation of the
	// timer that removes each.
	retiring   map[k8stypes.NamespacedName]uint64
	retirement uint64

	// mu guards what the gRPC callbacks and Status read.
	mu       sync.Mutex
	plans    map[k8stypes.NamespacedName]plan.RoutePlan
	synced   bool
	version  string            // version of the whole snapshot in the cache; "" before the first
	versions map[string]string // by type URL: the version of each type in the cache
	// policies holds each policy's own resources' hashes in the snapshot in
	// the cache, and history which policy hashes recent type versions held,
	// so Status can tell what a proxy runs from the versions it ACKed.
	policies map[k8stypes.NamespacedName]envoyconf.PolicyHash
	history  map[string][]typeVersion
	streams  map[int64]*streamState
	// pushing is true while the push loop runs (PushDebounce); stale
	// when plans changed since the loop last translated them.
	pushing bool
	stale   bool

	lisMu sync.Mutex
	lis   net.Listener

	events chan event.GenericEvent
	dirty  chan struct{}
	kick   chan struct{}

	// translator keeps each policy's translation until its plan changes.
	// Guarded by pubMu.
	translator *envoyconf.Translator
}

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
	if opts.Logger.GetSink() == nil {
		opts.Logger = ctrl.Log.WithName("xds")
	}
	opts.Translate = opts.Translate.WithDefaults()
	return &Server{
		opts: opts,
		log:  opts.Logger,
		// Not in "ADS mode": that mode answers a request only when it names
		// every resource of the type, so while policies are being added an
		// EDS request (naming the clusters of the proxy's last CDS) waits
		// until it catches up, and Envoy's clusters sat warming for its 15s
		// EDS timeout with 100 policies applied at once. A request naming a
		// subset gets that subset.
		cache:      cachev3.NewSnapshotCache(false, groupHash{}, logAdapter{opts.Logger}),
		pending:    map[k8stypes.NamespacedName]bool{},
		seen:       map[k8stypes.NamespacedName]bool{},
		retiring:   map[k8stypes.NamespacedName]uint64{},
		plans:      map[k8stypes.NamespacedName]plan.RoutePlan{},
		translator: envoyconf.NewTranslator(opts.Translate, envoyconf.TranslatorCounters{Translations: translationsTotal, Assemblies: assembliesTotal}),
		streams:    map[int64]*streamState{},
		events:     make(chan event.GenericEvent, 256),
		dirty:      make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
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
	opts := []grpc.ServerOption{
		// Envoy pings every 30s (see the bootstrap); gRPC's default policy would
		// answer pings more often than every 5 minutes with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
	}
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, s.cache, callbacks{s}))
	go s.notifyLoop(ctx)
	if s.opts.PushDebounce > 0 {
		go s.pushLoop(ctx)
	}

	served := make(chan error, 1)
	go func() { served <- g.Serve(s.lis) }()
	s.log.Info("serving xDS", "address", addr.String(), "mutualTLS", s.opts.TLS != nil)
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

// Events delivers a GenericEvent for each policy whose Status changed: a
// proxy connected or left, ACKed or NACKed, or a new version of the policy was
// published. Bursts are coalesced (100ms), and a policy whose status did not
// move gets no event, so one policy's change does not wake a thousand
// reconciles. Feed it to the HedgePolicy controller with
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
	last := map[k8stypes.NamespacedName]publish.ProgramStatus{}
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
		current := make(map[k8stypes.NamespacedName]publish.ProgramStatus, len(keys))
		for _, k := range keys {
			current[k] = s.Status(k)
		}
		for _, k := range keys {
			if prev, ok := last[k]; ok && prev == current[k] {
				continue
			}
			ev := event.GenericEvent{Object: &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
			select {
			case s.events <- ev:
			case <-ctx.Done():
				return
			}
		}
		last = current
	}
}
