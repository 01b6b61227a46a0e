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

// Package istio publishes route plans to an Istio mesh as EnvoyFilters: Istio
// has no hedging API, so tailcut patches the hedge into the routes istiod
// already generates for the Service.
package istio

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
)

// EnvoyFilterGVK is the Istio API tailcut writes.
var EnvoyFilterGVK = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"}

// Labels on every EnvoyFilter tailcut writes: it lists and removes its own by
// them, never by name alone.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "tailcut"
	// LabelPolicy is the policy's name, bounded (policyLabel);
	// AnnotationPolicy holds it whole.
	LabelPolicy      = "tailcut.dev/policy"
	AnnotationPolicy = "tailcut.dev/policy"
)

// NewEnvoyFilter is an empty EnvoyFilter, for watches and reads.
func NewEnvoyFilter() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(EnvoyFilterGVK)
	return u
}

// Host is the Service's name in the mesh: istiod names the outbound virtual
// host <Host>:<port> and the cluster outbound|<port>||<Host>.
func Host(service, namespace string) string { return service + "." + namespace + ".svc.cluster.local" }

// ErrPathPrefix is returned for a plan that hedges only part of the Service's
// paths: the route patch lands on the virtual host's routes whatever their
// paths, and Envoy routes cannot say "every path but this prefix".
var ErrPathPrefix = errors.New("publish.target Istio hedges every path of the Service: match.pathPrefix must be /")

// EnvoyFilter renders a plan as the EnvoyFilter of its policy (namespace and
// name from the plan, "ns/name"). Four patches on the Service's virtual host
// (<svc>.<ns>.svc.cluster.local:<port>), and a fifth on its cluster with an
// affinity:
//
//   - MERGE on every routing route (action ROUTE): the hedged retry policy
//     and the hedge policy, as the xDS translator sets them but keeping the
//     mesh's failure retries (routeAction), and the terms of the policy's
//     hedge account as route metadata (envoyconf.HedgeAccount), which the
//     namespace's account filter (AccountFilter) acts on. MERGE keeps what
//     istiod or the user's VirtualService put on the route (destinations,
//     weights, rewrites, timeouts); it overrides the retry policy's scalar
//     fields (retry_on, num_retries, per_try_timeout,
//     host_selection_retry_max_attempts) and appends to its lists (a second
//     previous_hosts predicate beside Istio's).
//   - INSERT_FIRST a route for every method the plan does not hedge, to the
//     Service's cluster, that retries only what never reached the Service
//     (connect-failure, refused-stream) and never hedges. The MERGE cannot
//     leave them out: retriable_request_headers does not stop a hedge (with
//     it, Envoy 1.40 still sent a POST's second attempt, without its body), and
//     istiod applies MERGE before INSERT, so the inserted route keeps no
//     hedge.
//   - INSERT_FIRST the bypass route (<ns>/<policy>/bypass, as on tailcut's own
//     proxy): every request carrying plan.BypassHeader: 1, whatever its
//     method, to the same cluster with the same retries as the unhedged route
//     and no hedge and no account metadata. tailcut verify's reference arm
//     takes it through the client's own sidecar. istiod applies the
//     INSERT_FIRSTs in the order of the patches, each at the front, so this
//     one, after the unhedged route's, ends up first: the sidecar's routes are
//     bypass, unhedged, then istiod's (hedged) routes.
//   - MERGE on the virtual host: attempt counts on requests, so that backends
//     can count hedges. Not on responses: the account reads the stream's
//     attempt count from Envoy, and clients never see it.
//   - with an affinity, MERGE on the Service's cluster
//     (outbound|<port>||<host>): the consistent-hash load balancer
//     (envoyconf.AffinityLoadBalancer), which replaces the one a
//     DestinationRule sets; and on every route above, the key's hash policy.
//
// A plan without a hedge (hedging off) merges no retry policy: the routes keep
// the mesh's (or a VirtualService's) retries. Turning hedging off is still a
// content change istiod pushes, not a removal.
func EnvoyFilter(p plan.RoutePlan, context tailcutv1alpha1.IstioContext) (*unstructured.Unstructured, error) {
	if p.Match.PathPrefix != "/" {
		return nil, ErrPathPrefix
	}
	ns, name, ok := strings.Cut(p.Name, "/")
	if !ok {
		return nil, fmt.Errorf("plan name %q is not namespace/name", p.Name)
	}
	host := Host(p.Service, p.Namespace)
	patchContext := "SIDECAR_OUTBOUND"
	if context == tailcutv1alpha1.IstioGateway {
		patchContext = "GATEWAY"
	}
	// match selects the Service's virtual host, and its routes of one action
	// unless action is empty.
	match := func(action string) map[string]any {
		vhost := map[string]any{"name": plan.MeshVirtualHost(p.Namespace, p.Service, p.Port)}
		if action != "" {
			vhost["route"] = map[string]any{"action": action}
		}
		return map[string]any{"context": patchContext, "routeConfiguration": map[string]any{"vhost": vhost}}
	}
	merged := &routev3.Route{StatPrefix: plan.MeshHedgedStatPrefix}
	if action := routeAction(p); action != nil {
		merged.Action = &routev3.Route_Route{Route: action}
	}
	if p.Hedge != nil {
		merged.Metadata = envoyconf.HedgeAccount(p, meshRetries(p.Hedge))
	}
	hedgedRoute, err := envoyconf.MessageMap(merged)
	if err != nil {
		return nil, err
	}
	unhedged, err := envoyconf.MessageMap(unhedgedRoute(p, host))
	if err != nil {
		return nil, err
	}
	bypass, err := envoyconf.MessageMap(bypassRoute(p, host))
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"configPatches": []any{
			map[string]any{
				"applyTo": "HTTP_ROUTE",
				"match":   match("ROUTE"),
				"patch":   map[string]any{"operation": "MERGE", "value": hedgedRoute},
			},
			map[string]any{
				"applyTo": "HTTP_ROUTE",
				"match":   match("ANY"),
				"patch":   map[string]any{"operation": "INSERT_FIRST", "value": unhedged},
			},
			// After the unhedged route's INSERT_FIRST, so it is inserted
			// in front of it (see EnvoyFilter).
			map[string]any{
				"applyTo": "HTTP_ROUTE",
				"match":   match("ANY"),
				"patch":   map[string]any{"operation": "INSERT_FIRST", "value": bypass},
			},
			map[string]any{
				"applyTo": "VIRTUAL_HOST",
				"match":   match(""),
				"patch": map[string]any{"operation": "MERGE", "value": map[string]any{
					"include_request_attempt_count": true,
				}},
			},
		}},
	}}
	if p.Affinity != nil {
		lb, err := envoyconf.MessageMap(envoyconf.AffinityLoadBalancer(p.Affinity))
		if err != nil {
			return nil, err
		}
		spec := u.Object["spec"].(map[string]any)
		spec["configPatches"] = append(spec["configPatches"].([]any), map[string]any{
			"applyTo": "CLUSTER",
			"match": map[string]any{"context": patchContext, "cluster": map[string]any{
				"service": host, "portNumber": int64(p.Port),
			}},
			"patch": map[string]any{"operation": "MERGE", "value": lb},
		})
	}
	u.SetGroupVersionKind(EnvoyFilterGVK)
	u.SetNamespace(ns)
	u.SetName(FilterName(name))
	u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelPolicy: policyLabel(name)})
	u.SetAnnotations(map[string]string{AnnotationPolicy: name})
	return u, nil
}

// Istio's default retry policy on every HTTP route (meshConfig's
// defaultHttpRetryPolicy unset), as istiod renders it.
const (
	MeshRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	MeshRetries = 2
)

// routeAction is the part of the route the MERGE patch sets. No timeout: the
// route keeps istiod's (none) or the VirtualService's. With hedging off it
// sets no retries: the route keeps the mesh's. With an affinity it adds the
// key's hash policy, after any a DestinationRule's consistentHash put there
// (Envoy then hashes both).
//
// With hedging on, the route retries on the mesh's default conditions and
// the policy's, up to max(MeshRetries, maxHedges) times: Envoy counts hedges
// and failure retries against one num_retries, so a request that is not
// hedged keeps the mesh's two failure retries, and the hedge account caps a
// hedged one at 1 + its hedges (the account's "retries" term). Where a
// VirtualService sets retries, the patch replaces them (RetriesPreserved).
func routeAction(p plan.RoutePlan) *routev3.RouteAction {
	var action *routev3.RouteAction
	if p.Hedge != nil {
		retry := envoyconf.HedgeRetryPolicy(p)
		retry.RetryOn = RetryOn(p.Hedge.RetryOn)
		retry.NumRetries = wrapperspb.UInt32(uint32(meshRetries(p.Hedge)))
		action = &routev3.RouteAction{
			RetryPolicy: retry,
			HedgePolicy: &routev3.HedgePolicy{HedgeOnPerTryTimeout: true},
		}
	}
	if p.Affinity != nil {
		if action == nil {
			action = &routev3.RouteAction{}
		}
		action.HashPolicy = envoyconf.AffinityHashPolicy(p.Affinity)
	}
	return action
}

// RetryOn is the policy's retry conditions and the mesh's default ones.
func RetryOn(policy []string) string {
	on := slices.Clone(policy)
	for _, c := range strings.Split(MeshRetryOn, ",") {
		if !slices.Contains(on, c) {
			on = append(on, c)
		}
	}
	return strings.Join(on, ",")
}

// RetriesKept says, for status, what failure retries the policy's routes
// keep.
func RetriesKept(p plan.RoutePlan) string {
	if p.Hedge == nil {
		return "hedging is off: the routes keep the mesh's retries"
	}
	return fmt.Sprintf("requests make at most %d hedge(s) after %s; a hedged request makes at most %d attempts, hedges and retries together; one that is not hedged keeps up to %d failure retries, on %s (the mesh's default, %d on %s, and the policy's)",
		p.Hedge.MaxHedges, p.Hedge.Delay, 1+p.Hedge.MaxHedges, meshRetries(p.Hedge), RetryOn(p.Hedge.RetryOn), MeshRetries, MeshRetryOn)
}

// meshRetries is the hedged route's num_retries on a mesh.
func meshRetries(h *plan.Hedge) int { return max(MeshRetries, int(h.MaxHedges)) }

// UnhedgedRouteName names the route inserted for the methods not hedged.
const UnhedgedRouteName = "tailcut-unhedged"

// unhedgedRoute takes every method but the plan's to the Service's cluster,
// unhedged.
func unhedgedRoute(p plan.RoutePlan, host string) *routev3.Route {
	return &routev3.Route{
		Name: UnhedgedRouteName,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers: []*routev3.HeaderMatcher{{
				Name: ":method",
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "^(" + strings.Join(p.Match.Methods, "|") + ")$"}},
				}},
				InvertMatch: true,
			}},
		},
		Action:     &routev3.Route_Route{Route: unhedgedAction(p, host)},
		StatPrefix: plan.MeshUnhedgedStatPrefix,
	}
}

// BypassRouteName names the bypass route of a policy ("ns/name"), as on
// tailcut's own proxy.
func BypassRouteName(policy string) string { return policy + "/bypass" }

// bypassRoute takes every request carrying plan.BypassHeader: 1 to the
// Service's cluster, unhedged, as the unhedged route does.
//
// Each route tailcut writes carries a stat_prefix of its own
// (plan.MeshHedgedStatPrefix on the hedged routes, MeshUnhedgedStatPrefix,
// MeshBypassStatPrefix): istiod gives the Service's port one cluster, which
// all of them share, so the estimator reads the hedged route's own stats
// (controllers/estimate/query.go), never the cluster's, and this route's
// requests (tailcut verify's reference arm) never reach the estimate.
func bypassRoute(p plan.RoutePlan, host string) *routev3.Route {
	return &routev3.Route{
		Name: BypassRouteName(p.Name),
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers: []*routev3.HeaderMatcher{{
				Name: plan.BypassHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "1"},
				}},
			}},
		},
		Action:     &routev3.Route_Route{Route: unhedgedAction(p, host)},
		StatPrefix: plan.MeshBypassStatPrefix,
	}
}

// unhedgedAction is the action of the routes tailcut inserts: the Service's
// cluster, as istiod names it, with no timeout (as istiod sets none), retrying
// only what never reached the Service (connect-failure, refused-stream), and
// no hedge.
func unhedgedAction(p plan.RoutePlan, host string) *routev3.RouteAction {
	a := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: fmt.Sprintf("outbound|%d||%s", p.Port, host)},
		Timeout:          durationpb.New(0),
		RetryPolicy:      &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream", NumRetries: wrapperspb.UInt32(2)},
	}
	if p.Affinity != nil {
		a.HashPolicy = envoyconf.AffinityHashPolicy(p.Affinity)
	}
	return a
}
