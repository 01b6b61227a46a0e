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
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Gateway is an Envoy Gateway Gateway, as tailcut patches it.
type Gateway struct {
	Key types.NamespacedName `json:"key"`
	// Listeners are the names of its HTTP and HTTPS listeners, sorted: Envoy
	// Gateway builds one Envoy listener and route configuration for each
	// (RouteConfigName), and the hedge account goes on all of them.
	Listeners []string `json:"listeners"`
}

// Attachment is where one Gateway routes to a Service port: what a policy's
// patch on that Gateway changes.
type Attachment struct {
	Gateway Gateway `json:"gateway"`
	// Rules are the HTTPRoute rules that send to the Service port, on each
	// listener they attach to. Sorted, unique.
	Rules []ListenerRule `json:"rules"`
}

// ListenerRule is one HTTPRoute rule on one Gateway listener: the routes of
// the listener's route configuration whose action is the rule's cluster
// (RuleCluster) are hedged.
type ListenerRule struct {
	Listener string `json:"listener"`
	Cluster  string `json:"cluster"`
}

// Routes is what Attachments found for a Service port.
type Routes struct {
	Attachments []Attachment
	// Ignored says, for status, which HTTPRoutes send to the Service through
	// a parent tailcut does not patch, and why.
	Ignored []string
}

// Attachments finds, among routes (HTTPRoutes of any namespace) and gateways
// (the Envoy Gateway Gateways, by key), the rules that send to the Service
// port and the Gateway listeners they attach to. A rule sends to the Service
// when one of its backendRefs names it (the rule's other backends are hedged
// with it: Envoy Gateway gives a rule one cluster). Sorted by Gateway.
func Attachments(routes []unstructured.Unstructured, gateways map[types.NamespacedName]Gateway, namespace, service string, port int32) Routes {
	byGateway := map[types.NamespacedName]*Attachment{}
	var out Routes
	for _, r := range routes {
		var clusters []string
		rules, _, _ := unstructured.NestedSlice(r.Object, "spec", "rules")
		for i, rule := range rules {
			if sendsTo(rule, r.GetNamespace(), namespace, service, port) {
				clusters = append(clusters, RuleCluster(r.GetNamespace(), r.GetName(), i))
			}
		}
		if len(clusters) == 0 {
			continue
		}
		parents, _, _ := unstructured.NestedSlice(r.Object, "spec", "parentRefs")
		for _, parent := range parents {
			ref, _ := parent.(map[string]any)
			group, kind := str(ref, "group", GatewayAPIGroup), str(ref, "kind", "Gateway")
			key := types.NamespacedName{Namespace: str(ref, "namespace", r.GetNamespace()), Name: str(ref, "name", "")}
			gw, ok := gateways[key]
			if group != GatewayAPIGroup || kind != "Gateway" || !ok {
				out.Ignored = append(out.Ignored, fmt.Sprintf("HTTPRoute %s/%s: parent %s %s is not an Envoy Gateway Gateway", r.GetNamespace(), r.GetName(), kind, key))
				continue
			}
			listeners := gw.Listeners
			if section := str(ref, "sectionName", ""); section != "" {
				if !slices.Contains(gw.Listeners, section) {
					out.Ignored = append(out.Ignored, fmt.Sprintf("HTTPRoute %s/%s: Gateway %s has no HTTP listener %q", r.GetNamespace(), r.GetName(), key, section))
					continue
				}
				listeners = []string{section}
			}
			a := byGateway[key]
			if a == nil {
				a = &Attachment{Gateway: gw}
				byGateway[key] = a
			}
			for _, l := range listeners {
				for _, c := range clusters {
					a.Rules = append(a.Rules, ListenerRule{Listener: l, Cluster: c})
				}
			}
		}
	}
	for _, a := range byGateway {
		slices.SortFunc(a.Rules, func(x, y ListenerRule) int {
			return cmp.Or(cmp.Compare(x.Listener, y.Listener), cmp.Compare(x.Cluster, y.Cluster))
		})
		a.Rules = slices.Compact(a.Rules)
		out.Attachments = append(out.Attachments, *a)
	}
	slices.SortFunc(out.Attachments, func(a, b Attachment) int {
		return cmp.Or(cmp.Compare(a.Gateway.Key.Namespace, b.Gateway.Key.Namespace), cmp.Compare(a.Gateway.Key.Name, b.Gateway.Key.Name))
	})
	slices.Sort(out.Ignored)
	return out
}

// GatewayOf is an Envoy Gateway Gateway's listeners, or false when the
// Gateway's class is not Envoy Gateway's (classes: GatewayClass name to its
// controllerName).
func GatewayOf(gw unstructured.Unstructured, classes map[string]string) (Gateway, bool) {
	class, _, _ := unstructured.NestedString(gw.Object, "spec", "gatewayClassName")
	if classes[class] != ControllerName {
		return Gateway{}, false
	}
	g := Gateway{Key: types.NamespacedName{Namespace: gw.GetNamespace(), Name: gw.GetName()}}
	listeners, _, _ := unstructured.NestedSlice(gw.Object, "spec", "listeners")
	for _, l := range listeners {
		m, _ := l.(map[string]any)
		if p := str(m, "protocol", ""); p == "HTTP" || p == "HTTPS" {
			g.Listeners = append(g.Listeners, str(m, "name", ""))
		}
	}
	slices.Sort(g.Listeners)
	return g, true
}

// sendsTo says whether one of an HTTPRoute rule's backendRefs is the Service
// port (a Service backend: no group or kind, or kind Service).
func sendsTo(rule any, routeNamespace, namespace, service string, port int32) bool {
	m, _ := rule.(map[string]any)
	refs, _, _ := unstructured.NestedSlice(m, "backendRefs")
	return slices.ContainsFunc(refs, func(b any) bool {
		ref, _ := b.(map[string]any)
		p, _, _ := unstructured.NestedInt64(ref, "port")
		return str(ref, "group", "") == "" && str(ref, "kind", "Service") == "Service" &&
			str(ref, "namespace", routeNamespace) == namespace && str(ref, "name", "") == service && p == int64(port)
	})
}

// str is a string field of m, or def when it is absent or empty.
func str(m map[string]any, field, def string) string {
	if s, _ := m[field].(string); s != "" {
		return s
	}
	return def
}
