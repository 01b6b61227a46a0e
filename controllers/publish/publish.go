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

// Package publish defines how route plans reach Envoy. Each way (tailcut's xDS
// server, Istio EnvoyFilters) implements Publisher in its own package.
package publish

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/plan"
)

// Publisher delivers route plans to Envoy in one way: tailcut's own xDS server,
// or Istio EnvoyFilters. The reconciler picks one per policy by
// spec.publish.target, in the way Flagger keeps one router per mesh.
type Publisher interface {
	// Publish makes p the configuration of its policy. It returns once the
	// change is accepted by the publisher; proxies acknowledge it later, which
	// Status reports.
	Publish(ctx context.Context, owner Owner, p plan.RoutePlan) error
	// Remove withdraws everything published for the policy. Removing a policy that
	// was never published is not an error.
	Remove(ctx context.Context, key types.NamespacedName) error
	// Status reports how far proxies took the policy's current configuration.
	Status(key types.NamespacedName) ProgramStatus
}

// Owner is the policy a plan is published for, as publishers need it. The
// contract names no API type: a publisher learns of the policy only this.
type Owner struct {
	// Key names the policy; Status and Remove take it. Empty: the plan's
	// name (namespace/name) is the key.
	Key types.NamespacedName
	// UID owns what a publisher writes to the API server (Istio's
	// EnvoyFilters), so that deleting the policy deletes it.
	UID types.UID
	// IstioContext names the proxies an Istio EnvoyFilter patches
	// (spec.publish.istio.context; empty: sidecars' outbound traffic).
	IstioContext string
}

// KeyOf is the owner's key, or the plan's name when the owner names none.
func (o Owner) KeyOf(p plan.RoutePlan) types.NamespacedName {
	if o.Key.Name != "" {
		return o.Key
	}
	ns, name, _ := strings.Cut(p.Name, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// ProgramStatus is how far proxies took one policy's configuration.
type ProgramStatus struct {
	// Connected is the number of proxies that should run the configuration.
	Connected int32
	// Programmed is the number that run the policy's current version.
	Programmed int32
	// Serving is the number that run a version of the policy, the current one
	// or an earlier one: while a change rolls out, they serve it.
	Serving int32
	// Version is the current version of the policy's configuration: a content
	// hash of its own resources, which moves only when they do.
	Version string
	// Rejected holds a proxy's error detail when it refused the policy's
	// current version.
	Rejected string
	// Detail, when set, says in the publisher's words where the
	// configuration is (Istio: which EnvoyFilter holds it).
	Detail string
	// Overridden, when set, says what user configuration the policy
	// overrides (Istio: a VirtualService's retries on the same host).
	Overridden string
	// Retries, when set, says what failure retries the policy's routes keep
	// (Istio: the mesh's defaults beside the hedges).
	Retries string
}

// SyncWaiter is implemented by publishers that serve nothing after start-up
// until every policy was reconciled once (the xDS server). The reconciler
// reports every reconcile, whatever its outcome, so that a policy that cannot
// be published never holds the others back.
type SyncWaiter interface {
	Reconciled(key types.NamespacedName)
}

// Retirer is implemented by publishers whose proxies carry a Service's
// traffic only on the policy's route (tailcut's xDS server): there, removing
// the route with the policy would answer every request 404. Retire stops the
// hedging at once and keeps the route, unhedged, for a while before it is
// removed. Publishers without it (Istio) remove the policy: the mesh's own
// routes then carry the traffic.
type Retirer interface {
	Retire(ctx context.Context, key types.NamespacedName) error
}

// UnpublishableError is a policy a publisher cannot express, whatever it
// retries: the reconciler reports it in Programmed and requeues at the
// policy's interval instead of returning it, which would requeue with
// back-off forever.
type UnpublishableError struct{ Err error }

func (e *UnpublishableError) Error() string { return e.Err.Error() }
func (e *UnpublishableError) Unwrap() error { return e.Err }
