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

package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// The Envoy cluster names of a Service port are a contract between the xDS
// translator, which names the clusters, and the estimator, which reads their
// stats from Prometheus by these names. Both call the functions below.
//
// The names have no dots, so Envoy's tag extraction (which cuts a cluster name
// at the first dot) gives them whole to Prometheus as envoy_cluster_name, and no
// "|" that would need escaping in PromQL regex matchers. Namespaces and Service
// names are DNS labels, which never contain "_", so the names are unambiguous.

// ClusterName is the cluster of a Service port's hedged route, and of nothing
// else: tailcut_<namespace>_<service>_<port>. Its stats are what the estimator
// reads, so they must describe exactly the traffic that is hedged:
//   - upstream_rq_retry counts the hedges (and retries on retryOn conditions)
//     and upstream_rq_total every attempt, so upstream_rq_retry /
//     (upstream_rq_total - upstream_rq_retry) is the share of requests slower
//     than the delay: the extra load.
//   - upstream_rq_time records one latency per request, the winner's. Below the
//     delay it is every unhedged request's true latency; above, it is censored
//     (see controllers/estimate/histogram.go).
func ClusterName(namespace, service string, port int32) string {
	return fmt.Sprintf("tailcut_%s_%s_%d", namespace, service, port)
}

// BypassClusterName is the cluster of every request to the Service port that
// tailcut does not hedge: requests carrying BypassHeader, methods and paths
// outside the policy's match. The same endpoints as ClusterName, never hedged,
// under its own name so the estimator never reads this traffic.
func BypassClusterName(namespace, service string, port int32) string {
	return ClusterName(namespace, service, port) + "_bypass"
}

// On an Istio mesh the routes of a Service's virtual host are istiod's, and so
// is its cluster, outbound|<port>||<host>, which every route to the Service
// shares: its stats mix hedged GETs with unhedged POSTs and the bypass. The
// EnvoyFilter therefore names each route tailcut patches with a stat_prefix,
// and the estimator reads the hedged route's own stats (MeshRouteMetric).
// pilot-agent exports vhost.*.route.* stats by default.
const (
	// MeshHedgedStatPrefix is the stat_prefix merged into the hedged routes.
	MeshHedgedStatPrefix = "tailcut_hedged"
	// MeshUnhedgedStatPrefix and MeshBypassStatPrefix name the inserted
	// unhedged and bypass routes, so that their traffic is counted apart.
	MeshUnhedgedStatPrefix = "tailcut_unhedged"
	MeshBypassStatPrefix   = "tailcut_bypass"
)

// MeshVirtualHost is the name istiod gives a Service port's virtual host in a
// sidecar's outbound routes: <service>.<namespace>.svc.cluster.local:<port>.
func MeshVirtualHost(namespace, service string, port int32) string {
	return fmt.Sprintf("%s.%s.svc.cluster.local:%d", service, namespace, port)
}

// MeshRouteMetric is the Prometheus name of a route stat (upstream_rq_time,
// upstream_rq_total, upstream_rq_retry) of the routes with stat prefix prefix
// in virtual host vhost, as a sidecar exports it: Istio's bootstrap turns
// Envoy's default tag extractors off, so the virtual host and the prefix stay
// in the name, and Envoy's Prometheus output turns every character outside
// [a-zA-Z0-9_] into "_".
func MeshRouteMetric(vhost, prefix, stat string) string {
	return MeshRoutesMetricPrefix(vhost) + promName(prefix+"."+stat)
}

// MeshRoutesMetricPrefix is how the name of every route stat in virtual host
// vhost begins: MeshRouteMetric is it, then <stat prefix>_<stat>. The
// operator exports it per mesh policy (tailcut_policy_info's mesh_routes), and
// the dashboards build the routes' metric names from it.
func MeshRoutesMetricPrefix(vhost string) string {
	return promName("envoy_vhost." + vhost + ".route.")
}

// promName is s as Envoy's Prometheus output spells a stat name: every
// character outside [a-zA-Z0-9_] becomes "_".
func promName(s string) string {
	name := []byte(s)
	for i, c := range name {
		if !promNameChar(c) {
			name[i] = '_'
		}
	}
	return string(name)
}

func promNameChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Bounded returns s if it fits in n characters, else its start and a hash of
// s, in n: the name of an object a publisher writes for a policy, or a label
// value, whatever the policy's name. s is a DNS subdomain, so the result is
// one, and a label value.
func Bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	hash := hex.EncodeToString(sum[:])[:10]
	// Each dot-separated part, and a label value, ends in a letter or digit.
	head := strings.TrimRight(s[:n-len(hash)-1], "-.")
	return head + "-" + hash
}

// GatewayRouteStatPrefix is the stat_prefix of the routes the Envoy Gateway
// publisher hedges for a Service port: Envoy then keeps route stats for them,
// which its default tag extraction exports as
// envoy_vhost_route_<stat>{envoy_route="<prefix>"}, and the estimator reads
// (GatewayRouteLabel). A gateway's virtual host is a hostname's, shared by
// every Service behind it, so the prefix names the Service port.
func GatewayRouteStatPrefix(namespace, service string, port int32) string {
	return fmt.Sprintf("tailcut_%s_%s_%d", namespace, service, port)
}

// GatewayRouteMetric is the Prometheus name of a route stat
// (upstream_rq_time, upstream_rq_total, upstream_rq_retry) on an Envoy
// Gateway proxy, and GatewayRouteLabel the label that carries the route's
// stat prefix: Envoy Gateway keeps Envoy's default tag extractors.
func GatewayRouteMetric(stat string) string { return "envoy_vhost_route_" + stat }

// GatewayRouteLabel: see GatewayRouteMetric.
const GatewayRouteLabel = "envoy_route"
