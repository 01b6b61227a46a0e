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
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tailcut/tailcut/controllers/plan"
)

// AffinityLoadBalancer is the part of a cluster an affinity sets: its
// consistent-hash load balancer. Both publishers merge it into the clusters
// of the plan (the xDS translator into its own, Istio's EnvoyFilter into the
// Service's).
func AffinityLoadBalancer(a *plan.Affinity) *clusterv3.Cluster {
	if a.LoadBalancer == plan.LoadBalancerMaglev {
		return &clusterv3.Cluster{
			LbPolicy: clusterv3.Cluster_MAGLEV,
			LbConfig: &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{
				TableSize: wrapperspb.UInt64(a.TableSize),
			}},
		}
	}
	return &clusterv3.Cluster{
		LbPolicy: clusterv3.Cluster_RING_HASH,
		LbConfig: &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(a.RingSize),
		}},
	}
}

// AffinityHashPolicy is the hash policy of every route of an affinity's plan.
// A cookie is only read, never set (no ttl). The path is hashed without its
// query string.
func AffinityHashPolicy(a *plan.Affinity) []*routev3.RouteAction_HashPolicy {
	var h routev3.RouteAction_HashPolicy
	switch a.HashOn {
	case plan.HashOnHeader:
		h.PolicySpecifier = &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: a.Name}}
	case plan.HashOnCookie:
		h.PolicySpecifier = &routev3.RouteAction_HashPolicy_Cookie_{Cookie: &routev3.RouteAction_HashPolicy_Cookie{Name: a.Name}}
	case plan.HashOnQueryParameter:
		h.PolicySpecifier = &routev3.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: a.Name}}
	case plan.HashOnPath:
		h.PolicySpecifier = &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{
			HeaderName: ":path",
			RegexRewrite: &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: `\?.*`},
				Substitution: "",
			},
		}}
	}
	return []*routev3.RouteAction_HashPolicy{&h}
}
