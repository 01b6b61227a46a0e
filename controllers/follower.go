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

package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/target"
)

// FollowerPublisher keeps the xDS server of a replica that is not the leader in
// step with the leader's decisions, so every replica serves the same routes.
//
// Only the leader evaluates policies and writes status. A follower rebuilds a
// policy's plan from its spec, its target's endpoints and the delay the leader
// wrote to status.effectiveDelay, and publishes it to its own server. It is a
// controller of its own that runs on every replica: a policy (status
// included), Service or EndpointSlice event rebuilds the policies it concerns,
// and nothing else does. Once this replica is elected it stands down, and the
// reconciler publishes instead. The server's first snapshot waits for a first
// reconcile of every policy (xds.Server.InitialSync runs on every replica).
type FollowerPublisher struct {
	// Client reads policies, Services and EndpointSlices from the manager's
	// cache.
	Client client.Reader
	// HostAliases resolves FQDN endpoints as the reconciler's do.
	HostAliases map[string][]string
	Publisher   publish.Publisher
	// Elected is closed when this replica becomes the leader (manager.Elected()).
	Elected <-chan struct{}
}

// Reconcile publishes the policy's plan from its status, or withdraws it.
func (f *FollowerPublisher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	select {
	case <-f.Elected:
		return ctrl.Result{}, nil
	default:
	}
	if w, ok := f.Publisher.(publish.SyncWaiter); ok {
		// Whatever the outcome: one policy that cannot be published must not
		// keep the others from being served.
		defer w.Reconciled(req.NamespacedName)
	}
	var policy tailcutv1alpha1.HedgePolicy
	if err := f.Client.Get(ctx, req.NamespacedName, &policy); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, f.retire(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !policy.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, f.retire(ctx, req.NamespacedName)
	}
	if policy.Spec.EffectivePublishTarget() != tailcutv1alpha1.PublishXDS {
		return ctrl.Result{}, f.Publisher.Remove(ctx, req.NamespacedName)
	}
	p, reason, err := f.planFromStatus(ctx, &policy)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case reason == tailcutv1alpha1.ReasonConflicted:
		return ctrl.Result{}, f.Publisher.Remove(ctx, req.NamespacedName)
	case reason != "":
		return ctrl.Result{}, f.retire(ctx, req.NamespacedName)
	}
	return ctrl.Result{}, f.Publisher.Publish(ctx, ownerOf(&policy), p)
}

// retire stops the policy's hedging as the leader does (retireEverywhere).
func (f *FollowerPublisher) retire(ctx context.Context, key types.NamespacedName) error {
	if retirer, ok := f.Publisher.(publish.Retirer); ok {
		return retirer.Retire(ctx, key)
	}
	return f.Publisher.Remove(ctx, key)
}

// SetupWithManager runs the follower on every replica. The manager's
// policies must be indexed by target (target.IndexPolicies).
func (f *FollowerPublisher) SetupWithManager(mgr ctrl.Manager) error {
	policies := target.Mappings{Reader: f.Client}
	return ctrl.NewControllerManagedBy(mgr).
		For(&tailcutv1alpha1.HedgePolicy{}).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(policies.ForService)).
		Watches(&tailcutv1alpha1.HedgePolicy{}, handler.EnqueueRequestsFromMapFunc(policies.BesidePolicy)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(policies.ForEndpointSlice)).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 4}).
		Named("hedgepolicy-follower").
		Complete(f)
}

// planFromStatus builds the plan the leader published, or says why the
// leader published none: the reason the policy is not accepted.
func (f *FollowerPublisher) planFromStatus(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy) (plan.RoutePlan, string, error) {
	// The leader's rules, on the same data: the older policy keeps the port.
	tgt, err := (&target.Resolver{Reader: f.Client, HostAliases: f.HostAliases}).Resolve(ctx, policy)
	if err != nil || tgt.Reason != "" {
		return plan.RoutePlan{}, tgt.Reason, err
	}
	// The leader's delay, unless it could not evaluate the policy (an
	// invalid query): then its route stays, unhedged.
	var delay time.Duration
	if d := policy.Status.EffectiveDelay; d != nil && !meta.IsStatusConditionFalse(policy.Status.Conditions, tailcutv1alpha1.ConditionAccepted) {
		delay = d.Duration
	}
	p, err := tgt.Plan(policy, delay, policy.Status.SlowEndpoints)
	return p, "", err
}
