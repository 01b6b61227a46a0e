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
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// StaticOptions change what StaticBootstrap makes of the resources.
type StaticOptions struct {
	// AccountModule, when set, is the path of the hedge account's module in
	// place of the one the resources name (the goldens name the proxies'
	// DefaultHedgeAccountModule; a test's Envoy loads one built from source).
	AccountModule string
	// WithoutAccount leaves the hedge account filter out, to measure what
	// Envoy does alone: its retry budget (TestRetryBudgetIntervalDoesNotCapHedges)
	// and the data path's cost without the account (make bench-proxy).
	// tailcut's proxies always run it.
	WithoutAccount bool
}

// StaticBootstrap turns translated resources into a bootstrap Envoy loads
// without a control plane, so that what tailcut renders can be validated
// (envoy --mode validate) and measured on its own: each listener's route
// configuration inline, and each EDS cluster STATIC with its load assignment.
// It changes res.
func StaticBootstrap(res *Resources, opts StaticOptions) (*bootstrapv3.Bootstrap, error) {
	routeByName := map[string]*routev3.RouteConfiguration{}
	for _, r := range res.Routes {
		routeByName[r.Name] = r
	}
	for _, l := range res.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					return nil, fmt.Errorf("listener %s: %w", l.Name, err)
				}
				rc := routeByName[hcm.GetRds().GetRouteConfigName()]
				if rc == nil {
					return nil, fmt.Errorf("listener %s refers to route configuration %q, which is not in the resources", l.Name, hcm.GetRds().GetRouteConfigName())
				}
				hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
				kept := hcm.HttpFilters[:0]
				for _, hf := range hcm.HttpFilters {
					switch {
					case hf.Name != HedgeBudgetFilter:
					case opts.WithoutAccount:
						continue
					case opts.AccountModule != "":
						hf = HedgeAccountModuleFilter(opts.AccountModule)
					}
					kept = append(kept, hf)
				}
				hcm.HttpFilters = kept
				f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&hcm)}
			}
		}
	}
	claByName := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, e := range res.Endpoints {
		claByName[e.ClusterName] = e
	}
	for _, c := range res.Clusters {
		cla := claByName[c.GetEdsClusterConfig().GetServiceName()]
		if cla == nil {
			return nil, fmt.Errorf("cluster %s has no load assignment in the resources", c.Name)
		}
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
		c.EdsClusterConfig = nil
		c.LoadAssignment = cla
	}
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{Listeners: res.Listeners, Clusters: res.Clusters}}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("static bootstrap: %w", err)
	}
	return b, nil
}
