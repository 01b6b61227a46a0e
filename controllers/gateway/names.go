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

// Package gateway publishes route plans to Envoy Gateway as EnvoyPatchPolicies:
// Envoy Gateway has retries and a retry budget (BackendTrafficPolicy) but no
// hedging, so tailcut patches the hedge into the routes Envoy Gateway builds
// for the HTTPRoute rules that send to the Service.
package gateway

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tailcut/tailcut/controllers/plan"
)

// The APIs tailcut reads (Gateway API) and writes (Envoy Gateway's).
var (
	PatchPolicyGVK  = schema.GroupVersionKind{Group: "gateway.envoyproxy.io", Version: "v1alpha1", Kind: "EnvoyPatchPolicy"}
	HTTPRouteGVK    = schema.GroupVersionKind{Group: GatewayAPIGroup, Version: "v1", Kind: "HTTPRoute"}
	GatewayGVK      = schema.GroupVersionKind{Group: GatewayAPIGroup, Version: "v1", Kind: "Gateway"}
	GatewayClassGVK = schema.GroupVersionKind{Group: GatewayAPIGroup, Version: "v1", Kind: "GatewayClass"}
)

const (
	// GatewayAPIGroup is the Gateway API's group.
	GatewayAPIGroup = "gateway.networking.k8s.io"
	// ControllerName is the GatewayClass controller of Envoy Gateway: tailcut
	// patches only the Gateways of such classes.
	ControllerName = "gateway.envoyproxy.io/gatewayclass-controller"
)

// Labels on every EnvoyPatchPolicy tailcut writes: it lists and removes its
// own by them, never by name alone. A policy's patch lives in its Gateway's
// namespace (a patch policy targets a Gateway of its own namespace), which
// may not be the policy's, so the labels name the policy's namespace too.
const (
	LabelManagedBy       = "app.kubernetes.io/managed-by"
	ManagedBy            = "tailcut"
	LabelRole            = "tailcut.dev/role"
	RolePolicy           = "hedge"
	RoleAccount          = "hedge-account"
	LabelPolicy          = "tailcut.dev/policy"
	LabelPolicyNamespace = "tailcut.dev/policy-namespace"
	// AnnotationPolicy holds the policy's namespace/name whole (the labels
	// are bounded); AnnotationVersion the content hash of the spec.
	AnnotationPolicy  = "tailcut.dev/policy"
	AnnotationVersion = "tailcut.dev/version"
)

// AccountPolicyName is the EnvoyPatchPolicy that puts the hedge account on a
// Gateway's listeners, in the Gateway's namespace, one per Gateway.
// PatchPolicyName's names all start with "tailcut-", so no policy's patch
// can take it.
func AccountPolicyName(gateway string) string {
	return plan.Bounded("hedge-account.tailcut.dev."+gateway, 253)
}

// PatchPolicyName is the EnvoyPatchPolicy of a policy on one Gateway, in the
// Gateway's namespace: "tailcut-<policy>.<policy's namespace>.<gateway>",
// bounded. Two policies, or two Gateways of a namespace, never share one.
func PatchPolicyName(namespace, policy, gateway string) string {
	return plan.Bounded("tailcut-"+policy+"."+namespace+"."+gateway, 253)
}

// labelValue bounds a label value.
func labelValue(s string) string { return plan.Bounded(s, 63) }

// RuleCluster is the Envoy cluster Envoy Gateway builds for rule i of an
// HTTPRoute: every backend of the rule, and the envoy_cluster_name of its
// stats. The routes of the rule's matches send to it.
func RuleCluster(namespace, route string, rule int) string {
	return fmt.Sprintf("httproute/%s/%s/rule/%d", namespace, route, rule)
}

// RouteConfigName is the route configuration, and the listener, Envoy
// Gateway builds for a Gateway listener.
func RouteConfigName(gatewayNamespace, gateway, listener string) string {
	return gatewayNamespace + "/" + gateway + "/" + listener
}
