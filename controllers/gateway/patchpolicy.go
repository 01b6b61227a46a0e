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

package gateway

import (
	"errors"
	"fmt"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
)

// The xDS resource types the patches address.
const (
	routeConfigurationType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	listenerType           = "type.googleapis.com/envoy.config.listener.v3.Listener"
)

// Errors for plans a Gateway's routes cannot take.
var (
	ErrPathPrefix = errors.New("publish.target EnvoyGateway hedges whole HTTPRoute rules: match.pathPrefix must be /")
	ErrAffinity   = errors.New("publish.target EnvoyGateway does not take affinity yet: Envoy Gateway builds the rule's cluster and its load balancer")
)

// NewPatchPolicy is an empty EnvoyPatchPolicy, for watches and reads.
func NewPatchPolicy() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(PatchPolicyGVK)
	return u
}

// PatchPolicy renders a hedged plan as its EnvoyPatchPolicy on one Gateway.
// For every rule of the attachment, four JSON patches on each route of its
// listener's route configuration whose action sends to the rule's cluster (a
// JSONPath filter on route.cluster, so the patch needs neither the virtual
// host's name nor the route's place):
//
//   - retry_policy: the hedged retry policy, as the xDS translator sets it
//     (per-try timeout = the delay, previous_hosts, the hedges as
//     num_retries). It replaces a BackendTrafficPolicy's retries on those
//     routes: the two cannot both hold, and the policy asked for a hedge.
//   - hedge_policy: hedge_on_per_try_timeout.
//   - metadata: the terms of the policy's hedge account, with the methods it
//     hedges. The route serves every method of its rule, and Envoy routes
//     cannot be split by a patch, so the Gateway's account filter
//     (AccountPolicy) keeps every other method unhedged and unretried: a
//     POST runs once.
//   - stat_prefix: plan.GatewayRouteStatPrefix, so that Envoy keeps the
//     routes' own latency histogram and counters for the estimator.
//
// A plan without a hedge (an Auto policy before its first reading, or
// hedging turned off) keeps only the stat prefix: the routes are Envoy
// Gateway's, and the estimator still reads their latency, from which the
// first delay comes.
func PatchPolicy(p plan.RoutePlan, a Attachment) (*unstructured.Unstructured, error) {
	switch {
	case p.Match.PathPrefix != "/":
		return nil, ErrPathPrefix
	case p.Affinity != nil:
		return nil, ErrAffinity
	}
	ns, name, ok := strings.Cut(p.Name, "/")
	if !ok {
		return nil, fmt.Errorf("plan name %q is not namespace/name", p.Name)
	}
	ops, err := routeOps(p)
	if err != nil {
		return nil, err
	}
	var patches []any
	for _, rule := range a.Rules {
		routes := fmt.Sprintf("$.virtual_hosts[*].routes[?(@.route.cluster == '%s')]", rule.Cluster)
		for _, op := range ops {
			patches = append(patches, map[string]any{
				"type": routeConfigurationType,
				"name": RouteConfigName(a.Gateway.Key.Namespace, a.Gateway.Key.Name, rule.Listener),
				"operation": map[string]any{
					"op": "add", "jsonPath": routes, "path": op.path, "value": op.value,
				},
			})
		}
	}
	u := patchPolicy(a.Gateway, PatchPolicyName(ns, name, a.Gateway.Key.Name), patches)
	u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRole: RolePolicy, LabelPolicy: labelValue(name), LabelPolicyNamespace: labelValue(ns)})
	u.SetAnnotations(map[string]string{AnnotationPolicy: p.Name})
	return u, nil
}

// routeOp is one JSON patch on each hedged route: a value at a path.
type routeOp struct {
	path  string
	value any
}

// routeOps are the patches of PatchPolicy, in order: the stat prefix alone
// for a plan without a hedge.
func routeOps(p plan.RoutePlan) ([]routeOp, error) {
	stats := routeOp{"/stat_prefix", plan.GatewayRouteStatPrefix(p.Namespace, p.Service, p.Port)}
	if p.Hedge == nil {
		return []routeOp{stats}, nil
	}
	retry, err := envoyconf.MessageMap(envoyconf.HedgeRetryPolicy(p))
	if err != nil {
		return nil, err
	}
	hedge, err := envoyconf.MessageMap(&routev3.HedgePolicy{HedgeOnPerTryTimeout: true})
	if err != nil {
		return nil, err
	}
	terms := envoyconf.HedgeAccount(p, int(p.Hedge.MaxHedges)).FilterMetadata[envoyconf.HedgeBudgetFilter]
	terms.Fields["methods"] = structpb.NewStringValue(strings.Join(p.Match.Methods, ","))
	return []routeOp{
		{"/route/retry_policy", retry},
		{"/route/hedge_policy", hedge},
		{"/metadata/filter_metadata/" + envoyconf.HedgeBudgetFilter, terms.AsMap()},
		stats,
	}, nil
}

// AccountPolicy puts the hedge account (the Proxy-Wasm module, inlined) in
// front of the router of every HTTP listener of the Gateway. One account
// serves every policy on the Gateway: it acts only on routes whose metadata
// carries an account's terms, which only tailcut's patched routes do. The
// patch finds the router by name (a JSONPath filter) and adds the account at
// its place, which puts it just before it.
func AccountPolicy(gw Gateway, module []byte) (*unstructured.Unstructured, error) {
	filter, err := envoyconf.MessageMap(envoyconf.HedgeAccountInlineFilter(module))
	if err != nil {
		return nil, err
	}
	var patches []any
	for _, listener := range gw.Listeners {
		patches = append(patches, map[string]any{
			"type": listenerType,
			"name": RouteConfigName(gw.Key.Namespace, gw.Key.Name, listener),
			"operation": map[string]any{
				"op":       "add",
				"jsonPath": "$..http_filters[?(@.name == 'envoy.filters.http.router')]",
				"value":    filter,
			},
		})
	}
	u := patchPolicy(gw, AccountPolicyName(gw.Key.Name), patches)
	u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRole: RoleAccount})
	return u, nil
}

// patchPolicy is an EnvoyPatchPolicy of JSON patches on a Gateway.
func patchPolicy(gw Gateway, name string, patches []any) *unstructured.Unstructured {
	u := NewPatchPolicy()
	u.SetNamespace(gw.Key.Namespace)
	u.SetName(name)
	u.Object["spec"] = map[string]any{
		"targetRef":   map[string]any{"group": GatewayAPIGroup, "kind": "Gateway", "name": gw.Key.Name},
		"type":        "JSONPatch",
		"jsonPatches": patches,
	}
	return u
}
