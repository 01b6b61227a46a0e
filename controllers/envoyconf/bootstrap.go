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

package envoyconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// XDSClusterName is the bootstrap's static cluster that reaches tailcut's xDS
// server.
const XDSClusterName = "tailcut_xds"

// ListenerPortMetadataKey is the node metadata key that carries the listener
// port the bootstrap was rendered for. The server logs a warning when it
// differs from the port it programs.
const ListenerPortMetadataKey = "tailcut.io/listener-port"

// Defaults of BootstrapOptions.
const (
	DefaultNodeCluster  = "tailcut"
	DefaultAdminAddress = "127.0.0.1"
	DefaultAdminPort    = 9901
)

// LatencyBucketsMs are the histogram buckets, in milliseconds, for
// upstream_rq_time and downstream_rq_time. Envoy's defaults (0.5, 1, 5, 10, 25,
// 50, 100, 250 ...) put p95 and p99 errors of tens of milliseconds into every
// estimate; these are dense from 5 to 150ms, where hedge delays live.
var LatencyBucketsMs = []float64{
	1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 22, 25, 28, 30, 33, 36, 40, 45, 50, 55, 60,
	70, 80, 90, 100, 110, 120, 130, 140, 150, 175, 200, 250, 300, 400, 500, 750, 1000, 2500, 5000, 10000,
}

// BootstrapOptions say where Envoy finds tailcut and how it identifies itself.
type BootstrapOptions struct {
	// XDSAddress is host:port of tailcut's xDS server. Required.
	XDSAddress string
	// NodeID identifies the proxy in tailcut's status and logs (the pod name).
	// Required.
	NodeID string
	// NodeCluster is node.cluster. Default "tailcut".
	NodeCluster string
	// AdminAddress and AdminPort are where Envoy's admin interface listens.
	// Default 127.0.0.1:9901.
	AdminAddress string
	AdminPort    uint32
	// TLS, when enabled, connects to the xDS server over mutual TLS: this
	// proxy's certificate and key, and the CA that signs the server's, whose
	// certificate must name the host of XDSAddress.
	TLS TLSFiles
	// StatsAddress and StatsPort, when StatsPort is set, add a listener that
	// serves only the admin interface's /stats/prometheus and /ready, so the
	// admin interface itself can stay on loopback: anyone who reaches it can
	// call /quitquitquit or /healthcheck/fail. StatsAddress defaults to
	// 0.0.0.0.
	StatsAddress string
	StatsPort    uint32
	// ListenerPort is the port the xDS server programs for the HTTP listener.
	// Envoy gets the listener over LDS; the port is recorded in the node
	// metadata only, so a mismatch with the server shows in its log. 0 leaves
	// it out.
	ListenerPort uint32
}

// Bootstrap renders Envoy's bootstrap YAML: node identity, ADS over gRPC (HTTP/2)
// to tailcut, listeners and clusters from ADS, the admin interface and fine
// latency histogram buckets.
func Bootstrap(opts BootstrapOptions) ([]byte, error) {
	if opts.NodeID == "" {
		return nil, errors.New("bootstrap: node id is empty")
	}
	host, portStr, err := net.SplitHostPort(opts.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: xDS address %q: %w", opts.XDSAddress, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 || host == "" {
		return nil, fmt.Errorf("bootstrap: xDS address %q needs a host and a port between 1 and 65535", opts.XDSAddress)
	}
	if opts.NodeCluster == "" {
		opts.NodeCluster = DefaultNodeCluster
	}
	if opts.TLS.Enabled() {
		if err := opts.TLS.Check(); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if opts.AdminAddress == "" {
		opts.AdminAddress = DefaultAdminAddress
	}
	if opts.AdminPort == 0 {
		opts.AdminPort = DefaultAdminPort
	}

	node := &corev3.Node{Id: opts.NodeID, Cluster: opts.NodeCluster}
	if opts.ListenerPort != 0 {
		md, err := structpb.NewStruct(map[string]any{ListenerPortMetadataKey: float64(opts.ListenerPort)})
		if err != nil {
			return nil, err
		}
		node.Metadata = md
	}

	b := &bootstrapv3.Bootstrap{
		Node: node,
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName},
				}}},
				SetNodeOnFirstMessageOnly: true,
			},
			LdsConfig: waitForever(adsSource()),
			CdsConfig: waitForever(adsSource()),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{xdsCluster(host, uint32(port), opts.TLS)},
		},
		Admin: &bootstrapv3.Admin{Address: socketAddress(opts.AdminAddress, opts.AdminPort)},
		// Histograms reach /stats/prometheus only at a stats flush. Flushing
		// when the admin interface is read, instead of every 5s, shows each
		// scrape the latencies up to the scrape before: the estimator sees a
		// shift or a new delay's effect up to 3s sooner.
		StatsFlush: &bootstrapv3.Bootstrap_StatsFlushOnAdmin{StatsFlushOnAdmin: true},
		StatsConfig: &metricsv3.StatsConfig{
			HistogramBucketSettings: []*metricsv3.HistogramBucketSettings{
				{Match: regexMatcher(`^cluster\..+\.upstream_rq_time$`), Buckets: LatencyBucketsMs},
				{Match: regexMatcher(`^http\..+\.downstream_rq_time$`), Buckets: LatencyBucketsMs},
			},
			StatsMatcher: &metricsv3.StatsMatcher{StatsMatcher: &metricsv3.StatsMatcher_InclusionList{
				InclusionList: &matcherv3.ListStringMatcher{Patterns: keptStats()},
			}},
			StatsTags: []*metricsv3.TagSpecifier{AccountStatsTag()},
		},
	}
	if opts.StatsPort != 0 {
		if opts.StatsAddress == "" {
			opts.StatsAddress = "0.0.0.0"
		}
		l, c, err := statsListener(opts.StatsAddress, opts.StatsPort, opts.AdminAddress, opts.AdminPort)
		if err != nil {
			return nil, err
		}
		b.StaticResources.Listeners = append(b.StaticResources.Listeners, l)
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, c)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	out, err := MessageYAML(b)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Envoy bootstrap rendered by 'tailcut bootstrap'.\n"), out...), nil
}

// KeptStats are the stats Envoy keeps, as regular expressions over their
// names: what the estimator, the chart's dashboards and alerts read, and the
// few that explain a proxy's state. Envoy's full set is about 300 series per
// cluster, two clusters per policy; with this list a cluster exports its
// latency histogram and a handful of counters. The hedged cluster's
// per-endpoint stats (track_cluster_stats.per_endpoint_stats) are not in
// Envoy's stats store: Envoy writes them at each scrape, past this list.
var KeptStats = []string{
	// Per tailcut cluster: the estimator's inputs, hedges dropped by the retry
	// circuit breaker, timeouts, healthy endpoints, EDS updates.
	`^cluster\.tailcut_[^.]+\.(upstream_rq_(total|retry|retry_overflow|timeout|time)|membership_healthy|update_(success|rejected))$`,
	// The listener's traffic and its routes' updates.
	`^http\.` + StatPrefix + `\.(downstream_rq_(total|time|[1-5]xx)|rds\..+)$`,
	// xDS health: listener and cluster updates, what they changed, the ADS
	// connection.
	`^listener_manager\.(lds\..+|total_listeners_active|listener_(added|modified|removed))$`,
	`^cluster_manager\.(cds\..+|active_clusters|cluster_(added|modified|removed))$`,
	`^control_plane\..+$`,
	`^server\.(live|state|uptime|memory_allocated|memory_heap_size|total_connections|concurrency|version)$`,
	// The hedge account's counters (hedgeaccount/src/lib.rs): requests it
	// hedged late, and requests it turned away with no hedge.
	`^wasmcustom\.` + accountStatPrefix + `\..+$`,
}

// accountStatPrefix begins the hedge account's counters:
// wasmcustom.tailcut_account.<namespace/name>.<counter>.
const accountStatPrefix = "tailcut_account"

// AccountStatsTagName is the tag that names a hedge account counter's
// policy on /stats/prometheus: "namespace/name", as the label of the same
// name on the operator's per-policy series.
const AccountStatsTagName = "policy"

// AccountStatsTag moves the policy out of a hedge account counter's name
// into a tag, so that Prometheus sees one series per policy of each counter.
// A policy's name may hold dots, so the policy is all between the prefix
// and the counter's name.
func AccountStatsTag() *metricsv3.TagSpecifier {
	return &metricsv3.TagSpecifier{
		TagName:  AccountStatsTagName,
		TagValue: &metricsv3.TagSpecifier_Regex{Regex: `^wasmcustom\.` + accountStatPrefix + `\.((.+)\.)(hedged_late|turned_away)$`},
	}
}

func keptStats() []*matcherv3.StringMatcher {
	out := make([]*matcherv3.StringMatcher, 0, len(KeptStats))
	for _, re := range KeptStats {
		out = append(out, regexMatcher(re))
	}
	return out
}

// Names of the stats listener and the cluster behind it.
const (
	StatsListenerName = "tailcut_stats"
	adminClusterName  = "tailcut_admin"
)

// statsListener serves GET /stats/prometheus and /ready from the admin
// interface, and nothing else (404), on its own address.
func statsListener(addr string, port uint32, adminAddr string, adminPort uint32) (*listenerv3.Listener, *clusterv3.Cluster, error) {
	toAdmin := func(path string) *routev3.Route {
		return &routev3.Route{
			Match: &routev3.RouteMatch{
				PathSpecifier: &routev3.RouteMatch_Path{Path: path},
				Headers:       []*routev3.HeaderMatcher{exactHeader(":method", "GET")},
			},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: adminClusterName}}},
		}
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: "stats",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: StatsListenerName,
			VirtualHosts: []*routev3.VirtualHost{{
				Name: StatsListenerName, Domains: []string{"*"},
				Routes: []*routev3.Route{toAdmin("/stats/prometheus"), toAdmin("/ready"), {
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       wellknown.Router,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	})
	if err != nil {
		return nil, nil, err
	}
	l := &listenerv3.Listener{
		Name:    StatsListenerName,
		Address: socketAddress(addr, port),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       wellknown.HTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}},
	}
	c := &clusterv3.Cluster{
		Name:                 adminClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: adminClusterName,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(adminAddr, adminPort)}},
			}}}},
		},
	}
	return l, c, nil
}

// waitForever sets initial_fetch_timeout to 0 on the first listeners and
// clusters: Envoy otherwise gives up on each after 15s and reports ready with
// no listener, taking traffic it cannot route while the operator has not
// synced. Waiting keeps the proxy out of its Service until tailcut serves.
func waitForever(src *corev3.ConfigSource) *corev3.ConfigSource {
	src.InitialFetchTimeout = durationpb.New(0)
	return src
}

// xdsCluster reaches the xDS server over HTTP/2, resolving a DNS name (the
// operator's Service) or using an IP as is.
func xdsCluster(host string, port uint32, files TLSFiles) *clusterv3.Cluster {
	discovery := clusterv3.Cluster_STRICT_DNS
	san := tlsv3.SubjectAltNameMatcher_DNS
	if _, err := netip.ParseAddr(host); err == nil {
		discovery, san = clusterv3.Cluster_STATIC, tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	var transport *corev3.TransportSocket
	if files.Enabled() {
		ctx := &tlsv3.UpstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{
				TlsCertificates: []*tlsv3.TlsCertificate{{
					CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: files.CertFile}},
					PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: files.KeyFile}},
				}},
				ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: files.CAFile}},
					// The server must be the one the bootstrap names.
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
						SanType: san,
						Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}},
					}},
				}},
				AlpnProtocols: []string{"h2"},
			},
		}
		if san == tlsv3.SubjectAltNameMatcher_DNS {
			ctx.Sni = host
		}
		transport = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
	}
	return &clusterv3.Cluster{
		TransportSocket:      transport,
		Name:                 XDSClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discovery},
		ConnectTimeout:       durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(&upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
					ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
						ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
							Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
								// Notice a vanished control plane within ~35s.
								ConnectionKeepalive: &corev3.KeepaliveSettings{
									Interval: durationpb.New(30 * time.Second),
									Timeout:  durationpb.New(5 * time.Second),
								},
							},
						},
					},
				},
			}),
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: XDSClusterName,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: socketAddress(host, port),
				}},
			}}}},
		},
	}
}

func regexMatcher(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
		SafeRegex: &matcherv3.RegexMatcher{Regex: re},
	}}
}
