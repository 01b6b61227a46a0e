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
	"strings"
	"testing"
)

// The dashboards, the chart's ServiceMonitor relabelling and users' queries
// spell these names out, so they are pinned here literally.
func TestClusterNames(t *testing.T) {
	if got := ClusterName("shop", "web-api", 8080); got != "tailcut_shop_web-api_8080" {
		t.Errorf("ClusterName = %q", got)
	}
	if got := BypassClusterName("shop", "web-api", 8080); got != "tailcut_shop_web-api_8080_bypass" {
		t.Errorf("BypassClusterName = %q", got)
	}
	// On a mesh: the sidecars' names for the stats of a route with a
	// stat_prefix (the dashboards and tailcut_policy_info's mesh_routes).
	if got := MeshRoutesMetricPrefix(MeshVirtualHost("shop", "web-api", 8080)); got != "envoy_vhost_web_api_shop_svc_cluster_local_8080_route_" {
		t.Errorf("MeshRoutesMetricPrefix = %q", got)
	}
	if got := MeshRouteMetric(MeshVirtualHost("shop", "web-api", 8080), MeshHedgedStatPrefix, "upstream_rq_total"); got != "envoy_vhost_web_api_shop_svc_cluster_local_8080_route_tailcut_hedged_upstream_rq_total" {
		t.Errorf("MeshRouteMetric = %q", got)
	}
	// Envoy's default tag extractor takes the cluster name up to the first dot.
	if strings.ContainsAny(ClusterName("a", "b", 1), ".|:") {
		t.Error("cluster names must not contain '.', '|' or ':'")
	}
}
