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

// Package target resolves what a HedgePolicy hedges: its Service port, the
// older policy that may hold that port already, and the endpoints that serve
// it. The leader's reconciler and every replica's follower call it, so both
// build a policy's plan from the same data by the same rules.
package target

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

// NameIndex indexes HedgePolicies by the name of their target Service
// (IndexPolicies).
const NameIndex = "spec.targetRef.name"

// IndexPolicies indexes the manager's HedgePolicies by target Service name,
// which Resolve and the watch mappings need. Call it once per manager.
func IndexPolicies(mgr manager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(context.Background(), &tailcutv1alpha1.HedgePolicy{}, NameIndex,
		func(o client.Object) []string { return []string{o.(*tailcutv1alpha1.HedgePolicy).Spec.TargetRef.Name} })
}

// Resolver reads targets through a client, from the manager's cache.
type Resolver struct {
	Reader client.Reader
	// HostAliases resolves FQDN EndpointSlice addresses before DNS, like a
	// hosts file. Local stacks need it: the API server refuses loopback IPs
	// in EndpointSlices, so their slices name hosts that map to 127.0.0.1.
	HostAliases map[string][]string
}

// Target is what a policy hedges, or why it hedges nothing.
type Target struct {
	// Port is the target Service port; nil when Reason is set.
	Port *corev1.ServicePort
	// Endpoints are the ready endpoints of the port.
	Endpoints []plan.Endpoint
	// Reason, when set, is why the policy is not accepted (an API reason:
	// UnsupportedTarget, TargetNotFound, PortNotFound, Conflicted), and
	// Message says it for the user.
	Reason, Message string
}

// Resolve finds the policy's target. A missing target or a conflict is a
// Reason, not an error: errors are only for API failures.
func (r *Resolver) Resolve(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy) (Target, error) {
	port, reason, msg, err := r.servicePort(ctx, policy)
	if err != nil || reason != "" {
		return Target{Reason: reason, Message: msg}, err
	}
	if reason, msg, err = r.conflict(ctx, policy); err != nil || reason != "" {
		return Target{Reason: reason, Message: msg}, err
	}
	endpoints, err := r.endpoints(ctx, policy, port)
	if err != nil {
		return Target{}, err
	}
	return Target{Port: port, Endpoints: endpoints}, nil
}

// Plan builds the policy's route plan to the target with the given delay (0:
// the route without a hedge), the slow endpoints weighted down.
func (t Target) Plan(policy *tailcutv1alpha1.HedgePolicy, delay time.Duration, slow []tailcutv1alpha1.SlowEndpoint) (plan.RoutePlan, error) {
	return plan.Build(Input(policy, delay, weighted(t.Endpoints, slow)))
}

// weighted gives the endpoints named slow their weight. A slow endpoint no
// longer among them is gone from the Service, and so from the plan.
func weighted(eps []plan.Endpoint, slow []tailcutv1alpha1.SlowEndpoint) []plan.Endpoint {
	if len(slow) == 0 {
		return eps
	}
	weights := make(map[string]int32, len(slow))
	for _, s := range slow {
		weights[s.Address] = s.Weight
	}
	out := slices.Clone(eps)
	for i, e := range out {
		out[i].Weight = weights[net.JoinHostPort(e.Address, strconv.Itoa(int(e.Port)))]
	}
	return out
}

func (r *Resolver) servicePort(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy) (*corev1.ServicePort, string, string, error) {
	ref := policy.Spec.TargetRef
	if ref.Kind != "" && ref.Kind != "Service" {
		return nil, tailcutv1alpha1.ReasonUnsupportedTarget, fmt.Sprintf("targetRef.kind %q is not supported; use Service", ref.Kind), nil
	}
	var svc corev1.Service
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: policy.Namespace, Name: ref.Name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, tailcutv1alpha1.ReasonTargetNotFound, fmt.Sprintf("Service %s/%s not found", policy.Namespace, ref.Name), nil
		}
		return nil, "", "", err
	}
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == ref.Port {
			return &svc.Spec.Ports[i], "", "", nil
		}
	}
	return nil, tailcutv1alpha1.ReasonPortNotFound, fmt.Sprintf("Service %s/%s has no port %d", policy.Namespace, ref.Name, ref.Port), nil
}

// conflict says whether an older policy hedges the same Service port. Envoy
// routes a Service port by one policy only, so the oldest (by creation time,
// then name: the same answer on every replica) keeps it; the others are not
// accepted, with reason Conflicted naming the winner.
func (r *Resolver) conflict(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy) (string, string, error) {
	var list tailcutv1alpha1.HedgePolicyList
	if err := r.Reader.List(ctx, &list, client.InNamespace(policy.Namespace), client.MatchingFields{NameIndex: policy.Spec.TargetRef.Name}); err != nil {
		return "", "", err
	}
	var winner *tailcutv1alpha1.HedgePolicy
	for i := range list.Items {
		p := &list.Items[i]
		if p.UID == policy.UID || !p.DeletionTimestamp.IsZero() || p.Spec.TargetRef.Port != policy.Spec.TargetRef.Port {
			continue
		}
		if older(p, policy) && (winner == nil || older(p, winner)) {
			winner = p
		}
	}
	if winner == nil {
		return "", "", nil
	}
	return tailcutv1alpha1.ReasonConflicted, fmt.Sprintf("Service %s port %d is hedged by the older policy %s/%s; one policy per Service port",
		policy.Spec.TargetRef.Name, policy.Spec.TargetRef.Port, winner.Namespace, winner.Name), nil
}

// older orders policies by creation time, then name.
func older(a, b *tailcutv1alpha1.HedgePolicy) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// endpoints lists the ready endpoints that serve the Service port.
func (r *Resolver) endpoints(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, svcPort *corev1.ServicePort) ([]plan.Endpoint, error) {
	var slices discoveryv1.EndpointSliceList
	if err := r.Reader.List(ctx, &slices, client.InNamespace(policy.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: policy.Spec.TargetRef.Name}); err != nil {
		return nil, err
	}
	var out []plan.Endpoint
	for _, s := range slices.Items {
		var port *int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == svcPort.Name && p.Port != nil {
				port = p.Port
			}
		}
		if port == nil {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, addr := range e.Addresses {
				for _, ip := range r.endpointIPs(ctx, s.AddressType, addr) {
					out = append(out, plan.Endpoint{Address: ip, Port: *port})
				}
			}
		}
	}
	return out, nil
}

// endpointIPs returns the IPs of one EndpointSlice address. Envoy's EDS takes IPs
// only, so FQDN addresses are resolved here: first in HostAliases, then by DNS
// (IPv4, bounded by a timeout). An FQDN that does not resolve contributes no
// endpoint rather than failing the policy.
func (r *Resolver) endpointIPs(ctx context.Context, t discoveryv1.AddressType, addr string) []string {
	if t != discoveryv1.AddressTypeFQDN {
		return []string{addr}
	}
	if ips, ok := r.HostAliases[addr]; ok {
		return ips
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip4", addr)
	if err != nil {
		logf.FromContext(ctx).Info("FQDN endpoint does not resolve; skipping it", "address", addr, "error", err.Error())
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// Input is the plan input of the policy's spec, with the delay and endpoints.
func Input(policy *tailcutv1alpha1.HedgePolicy, delay time.Duration, endpoints []plan.Endpoint) plan.Input {
	spec := &policy.Spec
	match := spec.EffectiveMatch()
	methods := make([]string, 0, len(match.Methods))
	for _, m := range match.Methods {
		methods = append(methods, string(m))
	}
	retryOn := make([]string, 0, len(spec.RetryOn))
	for _, c := range spec.EffectiveRetryOn() {
		retryOn = append(retryOn, string(c))
	}
	budget := spec.EffectiveBudget()
	return plan.Input{
		PolicyNamespace: policy.Namespace,
		PolicyName:      policy.Name,
		Service:         spec.TargetRef.Name,
		Port:            spec.TargetRef.Port,
		PathPrefix:      match.PathPrefix,
		Methods:         methods,
		Delay:           delay,
		MaxHedges:       spec.EffectiveMaxHedges(),
		RetryOn:         retryOn,
		BudgetPercent:   budget.MaxExtraLoadPercent,
		MinConcurrency:  budget.MinRetryConcurrency,
		Endpoints:       endpoints,
		Affinity:        affinity(spec.EffectiveAffinity()),
	}
}

// affinity is the plan's form of spec.affinity (defaulted), or nil.
func affinity(a *tailcutv1alpha1.Affinity) *plan.Affinity {
	if a == nil {
		return nil
	}
	out := &plan.Affinity{LoadBalancer: string(a.LoadBalancer)}
	switch {
	case a.HashOn.Header != "":
		out.HashOn, out.Name = plan.HashOnHeader, a.HashOn.Header
	case a.HashOn.Cookie != "":
		out.HashOn, out.Name = plan.HashOnCookie, a.HashOn.Cookie
	case a.HashOn.QueryParameter != "":
		out.HashOn, out.Name = plan.HashOnQueryParameter, a.HashOn.QueryParameter
	case a.HashOn.Path:
		out.HashOn = plan.HashOnPath
	}
	if a.LoadBalancer == tailcutv1alpha1.LoadBalancerMaglev {
		out.TableSize = uint64(*a.TableSize)
	} else {
		out.RingSize = uint64(*a.RingSize)
	}
	return out
}

// Mappings turn watched objects into the policies they concern: a Service,
// an EndpointSlice of a Service, or a policy beside others on one Service.
type Mappings struct{ Reader client.Reader }

// ForService maps a Service to the policies that target it.
func (m Mappings) ForService(ctx context.Context, o client.Object) []reconcile.Request {
	return m.targeting(ctx, o.GetNamespace(), o.GetName())
}

// BesidePolicy maps a policy to every policy on its Service, itself included.
func (m Mappings) BesidePolicy(ctx context.Context, o client.Object) []reconcile.Request {
	return m.targeting(ctx, o.GetNamespace(), o.(*tailcutv1alpha1.HedgePolicy).Spec.TargetRef.Name)
}

// ForEndpointSlice maps an EndpointSlice to the policies on its Service.
func (m Mappings) ForEndpointSlice(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return m.targeting(ctx, o.GetNamespace(), svc)
}

func (m Mappings) targeting(ctx context.Context, namespace, service string) []reconcile.Request {
	var list tailcutv1alpha1.HedgePolicyList
	if err := m.Reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{NameIndex: service}); err != nil {
		logf.FromContext(ctx).Error(err, "listing policies for target", "namespace", namespace, "service", service)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}
