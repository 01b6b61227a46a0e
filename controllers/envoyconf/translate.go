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

// Package xds serves route plans to Envoy: it translates plans into Envoy v3
// resources, serves them over ADS from a snapshot cache, tracks which proxies
// acknowledged them and renders the bootstrap that points Envoy at tailcut.
package envoyconf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tailcut/tailcut/controllers/plan"
)

// Names of the resources that do not depend on plans.
const (
	// ListenerName is the one HTTP listener tailcut programs.
	ListenerName = "tailcut_http"
	// RouteConfigName is the route configuration the listener loads over RDS.
	RouteConfigName = "tailcut_routes"
	// StatPrefix prefixes the listener's HTTP stats: http.tailcut.downstream_rq_time.
	StatPrefix = "tailcut"

	// DefaultListenerAddress and DefaultListenerPort are where the listener binds
	// when TranslateOptions leave them empty.
	DefaultListenerAddress = "0.0.0.0"
	DefaultListenerPort    = 10000

	connectTimeout = time.Second
)

// TranslateOptions are the translation settings that do not come from plans.
type TranslateOptions struct {
	// ListenerAddress is the IP the listener binds to. Default 0.0.0.0; tests
	// use 127.0.0.1.
	ListenerAddress string
	// ListenerPort is the listener's port. Default 10000.
	ListenerPort uint32
	// HedgeAccountModule is the path, on the proxies, of the hedge account's
	// Proxy-Wasm module. Default DefaultHedgeAccountModule.
	HedgeAccountModule string
}

// WithDefaults fills the fields left empty.
func (o TranslateOptions) WithDefaults() TranslateOptions {
	if o.ListenerAddress == "" {
		o.ListenerAddress = DefaultListenerAddress
	}
	if o.ListenerPort == 0 {
		o.ListenerPort = DefaultListenerPort
	}
	if o.HedgeAccountModule == "" {
		o.HedgeAccountModule = DefaultHedgeAccountModule
	}
	return o
}

// Resources is one complete configuration for Envoy, in a fixed order.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment

	versions map[string]string     // by type URL, see TypeVersions
	policies map[string]PolicyHash // each plan's own resources, by plan name
}

// Translate renders the plans into Envoy resources: one listener, one route
// configuration with a virtual host per plan, and a hedged and a bypass cluster
// (with their endpoints) per plan (plan.ClusterName, plan.BypassClusterName).
// Every resource passes its proto validation.
func Translate(plans []plan.RoutePlan, opts TranslateOptions) (*Resources, error) {
	return NewTranslator(opts, TranslatorCounters{}).Translate(plans)
}

// shared holds the resources that do not depend on plans: the listener, and
// the name of the route configuration its virtual hosts go into.
type shared struct {
	listener     *listenerv3.Listener
	listenerHash string
}

func newShared(opts TranslateOptions) (*shared, error) {
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: StatPrefix,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		// The listener is the clients' first hop, and no client is trusted:
		// Envoy honours x-envoy-max-retries, x-envoy-retry-on and the
		// timeout and hedge headers only from internal requests. Who is
		// internal is decided from the connection's address
		// (use_remote_address), never from a client's X-Forwarded-For,
		// against a list that matches no peer: the unspecified addresses.
		// An empty list would not do: Envoy then trusts RFC 1918 and
		// loopback peers, and a spoofed X-Forwarded-For: 10.0.0.1 (without
		// use_remote_address) or any in-cluster client got 11 attempts
		// where the policy allows 1 (TestHostileClientsCannotChangeHedging).
		UseRemoteAddress:  wrapperspb.Bool(true),
		XffNumTrustedHops: 0,
		InternalAddressConfig: &hcmv3.HttpConnectionManager_InternalAddressConfig{CidrRanges: []*corev3.CidrRange{
			{AddressPrefix: "0.0.0.0", PrefixLen: wrapperspb.UInt32(32)},
			{AddressPrefix: "::", PrefixLen: wrapperspb.UInt32(128)},
		}},
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: RouteConfigName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{HedgeAccountModuleFilter(opts.HedgeAccountModule), {
			Name:       wellknown.Router,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	})
	if err != nil {
		return nil, err
	}
	l := &listenerv3.Listener{
		Name:    ListenerName,
		Address: socketAddress(opts.ListenerAddress, opts.ListenerPort),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}
	if err := l.ValidateAll(); err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	h, err := hashOf([]validator{l})
	if err != nil {
		return nil, err
	}
	return &shared{listener: l, listenerHash: h}, nil
}

// assemble puts the shared resources and the plans' fragments (in plan order)
// together. Type versions hash the fragments' hashes, so assembling costs no
// encoding.
func assemble(sh *shared, frags []*fragment) (*Resources, error) {
	res := &Resources{
		Listeners: []*listenerv3.Listener{sh.listener},
		Routes:    []*routev3.RouteConfiguration{{Name: RouteConfigName, VirtualHosts: make([]*routev3.VirtualHost, 0, len(frags))}},
		Clusters:  make([]*clusterv3.Cluster, 0, 2*len(frags)),
		Endpoints: make([]*endpointv3.ClusterLoadAssignment, 0, 2*len(frags)),
		policies:  make(map[string]PolicyHash, len(frags)),
	}
	hashes := map[string]hash.Hash{resourcev3.RouteType: sha256.New(), resourcev3.ClusterType: sha256.New(), resourcev3.EndpointType: sha256.New()}
	fmt.Fprintf(hashes[resourcev3.RouteType], "%s\n", RouteConfigName)
	for _, f := range frags {
		res.Routes[0].VirtualHosts = append(res.Routes[0].VirtualHosts, f.vhost)
		res.Clusters = append(res.Clusters, f.clusters...)
		res.Endpoints = append(res.Endpoints, f.endpoints...)
		res.policies[f.plan.Name] = f.hash
		for typ, h := range hashes {
			fmt.Fprintf(h, "%s\n", f.hash.ByType[typ])
		}
	}
	res.versions = map[string]string{resourcev3.ListenerType: sh.listenerHash}
	for typ, h := range hashes {
		res.versions[typ] = hex.EncodeToString(h.Sum(nil))[:16]
	}
	return res, nil
}

// virtualHost gives the hedged route a cluster of its own: the estimator reads
// that cluster's stats, so every other request (the bypass header, other
// methods and paths) goes to the bypass cluster.
func virtualHost(p plan.RoutePlan) *routev3.VirtualHost {
	bypass := unhedged(plan.BypassClusterName(p.Namespace, p.Service, p.Port))
	hedgedAction := hedged(plan.ClusterName(p.Namespace, p.Service, p.Port), p)
	if p.Affinity != nil {
		bypass.HashPolicy = AffinityHashPolicy(p.Affinity)
		hedgedAction.HashPolicy = AffinityHashPolicy(p.Affinity)
	}
	prefix := p.Match.PathPrefix
	hedgedRoute := route(p.Name+"/hedged", prefix, []*routev3.HeaderMatcher{methodHeader(p.Match.Methods)}, hedgedAction)
	if p.Hedge != nil {
		hedgedRoute.Metadata = HedgeAccount(p, int(p.Hedge.MaxHedges))
	}
	routes := []*routev3.Route{
		route(p.Name+"/bypass", prefix, []*routev3.HeaderMatcher{exactHeader(plan.BypassHeader, "1")}, bypass),
		hedgedRoute,
		route(p.Name+"/unhedged", prefix, nil, bypass),
	}
	if prefix != "/" {
		routes = append(routes, route(p.Name+"/other", "/", nil, bypass))
	}
	// The attempt count on requests lets backends count hedges
	// (x-envoy-attempt-count > 1). The hedge account reads what a request
	// cost from the stream, so answers carry no attempt count.
	return &routev3.VirtualHost{Name: p.Name, Domains: p.Hosts, Routes: routes, IncludeRequestAttemptCount: true}
}

// route is one of tailcut's routes (virtualHost).
func route(name, prefix string, headers []*routev3.HeaderMatcher, action *routev3.RouteAction) *routev3.Route {
	return &routev3.Route{
		Name: name,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix},
			Headers:       headers,
		},
		Action: &routev3.Route_Route{Route: action},
	}
}

func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name: name,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value},
		}},
	}
}

// methodHeader matches the methods with one anchored regex; methods are plain
// upper-case words, so they need no escaping.
func methodHeader(methods []string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name: ":method",
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
				Regex: "^(" + strings.Join(methods, "|") + ")$",
			}},
		}},
	}
}

// unhedged routes carry an explicit retry policy with num_retries 0: Envoy
// reads an absent num_retries as 1, and a route-level policy also overrides any
// virtual-host policy, so these routes neither retry nor hedge.
func unhedged(cluster string) *routev3.RouteAction {
	return &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
		Timeout:          durationpb.New(plan.DefaultRouteTimeout),
		RetryPolicy:      &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(0)},
	}
}

func hedged(cluster string, p plan.RoutePlan) *routev3.RouteAction {
	if p.Hedge == nil {
		return unhedged(cluster)
	}
	return &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
		Timeout:          durationpb.New(p.Hedge.RouteTimeout()),
		RetryPolicy:      HedgeRetryPolicy(p),
		HedgePolicy:      &routev3.HedgePolicy{HedgeOnPerTryTimeout: true},
	}
}

// HedgeRetryPolicy is the retry policy Envoy hedges through, for every
// publisher: the per-try timeout is the delay, and with the route's
// hedge_on_per_try_timeout it starts a hedge instead of ending the attempt.
// The plan must hedge.
func HedgeRetryPolicy(p plan.RoutePlan) *routev3.RetryPolicy {
	h := p.Hedge
	return &routev3.RetryPolicy{
		RetryOn:       strings.Join(h.RetryOn, ","),
		NumRetries:    wrapperspb.UInt32(uint32(h.MaxHedges)),
		PerTryTimeout: durationpb.New(h.Delay),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(plan.HedgeBackoffBase),
			MaxInterval:  durationpb.New(plan.HedgeBackoffMax),
		},
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{
				TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{}),
			},
		}},
		HostSelectionRetryMaxAttempts: p.HostSelectionRetries(),
	}
}

// hedgedCluster is the cluster of the hedged route, with Envoy's stats per
// endpoint: the estimator reads each endpoint's requests and requests in
// flight to find one that answers far slower than the rest.
func hedgedCluster(name string, p plan.RoutePlan) *clusterv3.Cluster {
	c := cluster(name, p)
	c.TrackClusterStats = &clusterv3.TrackClusterStats{PerEndpointStats: true}
	return c
}

func cluster(name string, p plan.RoutePlan) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LbConfig:             &clusterv3.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &clusterv3.Cluster_RoundRobinLbConfig{}},
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority: corev3.RoutingPriority_DEFAULT,
			RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
				BudgetPercent:       &typev3.Percent{Value: p.Budget.RetryBudgetPercent()},
				MinRetryConcurrency: wrapperspb.UInt32(uint32(p.Budget.MinConcurrency)),
			},
		}}},
	}
	if p.Affinity != nil {
		proto.Merge(c, AffinityLoadBalancer(p.Affinity))
	}
	return c
}

// loadAssignment lists the endpoints, with their weights when weighted is
// set and one is weighted down: Envoy then gives every endpoint its weight
// (FullWeight unless lowered), since one without a weight would count as 1.
func loadAssignment(name string, eps []plan.Endpoint, weighted bool) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(eps) == 0 {
		return cla
	}
	weighted = weighted && plan.Weighted(eps)
	locality := &endpointv3.LocalityLbEndpoints{}
	for _, e := range eps {
		lbe := &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(e.Address, uint32(e.Port)),
			}},
		}
		if weighted {
			w := e.Weight
			if w == 0 {
				w = plan.FullWeight
			}
			lbe.LoadBalancingWeight = wrapperspb.UInt32(uint32(w))
		}
		locality.LbEndpoints = append(locality.LbEndpoints, lbe)
	}
	cla.Endpoints = []*endpointv3.LocalityLbEndpoints{locality}
	return cla
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

type validator interface {
	proto.Message
	ValidateAll() error
}

// each calls fn on every resource, in the fixed order.
func (r *Resources) each(fn func(validator) error) error {
	for _, l := range r.Listeners {
		if err := fn(l); err != nil {
			return err
		}
	}
	for _, rc := range r.Routes {
		if err := fn(rc); err != nil {
			return err
		}
	}
	for _, c := range r.Clusters {
		if err := fn(c); err != nil {
			return err
		}
	}
	for _, e := range r.Endpoints {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// Validate runs every resource's proto validation (ValidateAll) and returns
// all violations.
func (r *Resources) Validate() error {
	var errs []error
	_ = r.each(func(m validator) error {
		if err := m.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().Name(), err))
		}
		return nil
	})
	return errors.Join(errs...)
}

// Version is a content hash of the whole configuration: equal resources give
// equal versions across processes and restarts. Status shows it as the one
// version of a whole configuration.
func (r *Resources) Version() string {
	h := sha256.New()
	for _, typ := range allTypes {
		fmt.Fprintf(h, "%s %s\n", typ, r.versions[typ])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// TypeVersions is the content hash of each resource type's resources, by type
// URL. The snapshot carries them, so that a proxy receives a type only when
// its own resources changed: a new delay is an RDS push, a new endpoint an EDS
// push.
func (r *Resources) TypeVersions() map[string]string {
	return maps.Clone(r.versions)
}

// PolicyHash is the hash of the resources of the plan named name, and whether
// the configuration holds that plan.
func (r *Resources) PolicyHash(name string) (PolicyHash, bool) {
	h, ok := r.policies[name]
	return h, ok
}

// allTypes are the resource types of a configuration, in push order.
var allTypes = []string{resourcev3.ListenerType, resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.RouteType}

// hashOf is the first 16 hex digits of the SHA-256 of the messages'
// deterministic wire encoding, in order.
func hashOf(msgs []validator) (string, error) {
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, m := range msgs {
		b, err := opts.Marshal(m)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", m.ProtoReflect().Descriptor().FullName(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
