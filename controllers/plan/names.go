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

import "fmt"

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
