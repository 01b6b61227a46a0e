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
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// FollowerPublisher keeps the xDS server of a replica that is not the leader in
// step with the leader's decisions, so every replica serves the same routes.
//
// Only the leader evaluates policies and writes status. A follower rebuilds each
// XDS policy's plan from its spec, its target's endpoints and the delay the
// leader wrote to status.effectiveDelay, and publishes it to its own server; the
// content-hash version keeps unchanged plans from being pushed again. Once this
// replica is elected it stops, and the reconciler publishes instead.
type FollowerPublisher struct {
	// Reconciler builds plans; its Client should read from the manager's cache.
	Reconciler *HedgePolicyReconciler
	Publisher  publish.Publisher
	// Elected is closed when this replica becomes the leader (manager.Elected()).
	Elected <-chan struct{}
	// WaitForCacheSync blocks until the informers have synced.
	WaitForCacheSync func(context.Context) bool
	// MarkSynced is called once, after the first full pass, with the keys
	// published, so the server never serves a snapshot built from a cold cache.
	// A policy that failed in that pass does not hold it back: the others must
	// be served, and the failure is logged and retried at every pass.
	MarkSynced func(...types.NamespacedName)
	// Interval between passes; default 2s.
	Interval time.Duration
}

// NeedLeaderElection is false: followers are exactly the replicas it is for.
func (f *FollowerPublisher) NeedLeaderElection() bool { return false }

// Start runs passes until the replica is elected or ctx ends.
func (f *FollowerPublisher) Start(ctx context.Context) error {
	if !f.WaitForCacheSync(ctx) {
		return errors.New("follower publisher: caches did not sync")
	}
	interval := f.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	published := map[types.NamespacedName]bool{}
	marked := false
	for {
		select {
		case <-f.Elected:
			return nil
		default:
		}
		keys, listed, err := f.pass(ctx, published)
		if err != nil {
			logf.FromContext(ctx).Error(err, "follower publisher: some policies failed; retrying them at the next pass")
		}
		// Never mark without the full list: an empty first snapshot would
		// wipe every proxy's routes.
		if !marked && listed && ctx.Err() == nil {
			f.MarkSynced(keys...)
			marked = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.Elected:
			return nil
		case <-time.After(interval):
		}
	}
}

// pass publishes every XDS policy's plan and removes what is gone. listed is
// false when the policies could not be listed at all.
func (f *FollowerPublisher) pass(ctx context.Context, published map[types.NamespacedName]bool) (keys []types.NamespacedName, listed bool, err error) {
	var list tailcutv1alpha1.HedgePolicyList
	if err := f.Reconciler.List(ctx, &list); err != nil {
		return nil, false, err
	}
	var errs []error
	seen := map[types.NamespacedName]bool{}
	for i := range list.Items {
		policy := &list.Items[i]
		if !policy.DeletionTimestamp.IsZero() || policy.Spec.EffectivePublishTarget() != tailcutv1alpha1.PublishXDS {
			continue
		}
		key := client.ObjectKeyFromObject(policy)
		p, ok, err := f.planFromStatus(ctx, policy)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if err := f.Publisher.Publish(ctx, policy, p); err != nil {
			errs = append(errs, err)
			continue
		}
		seen[key], published[key] = true, true
		keys = append(keys, key)
	}
	for key := range published {
		if !seen[key] {
			if err := f.Publisher.Remove(ctx, key); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(published, key)
		}
	}
	return keys, true, errors.Join(errs...)
}

// planFromStatus builds the plan the leader published: ok is false when the
// policy's target is missing (the leader withdrew it).
func (f *FollowerPublisher) planFromStatus(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy) (plan.RoutePlan, bool, error) {
	svcPort, reason, _, err := f.Reconciler.resolveTarget(ctx, policy)
	if err != nil || reason != "" {
		return plan.RoutePlan{}, false, err
	}
	// The leader's rule, on the same data: the older policy keeps the port.
	if reason, _, err := f.Reconciler.conflict(ctx, policy); err != nil || reason != "" {
		return plan.RoutePlan{}, false, err
	}
	endpoints, err := f.Reconciler.endpointsFor(ctx, policy, svcPort)
	if err != nil {
		return plan.RoutePlan{}, false, err
	}
	var delay time.Duration
	if d := policy.Status.EffectiveDelay; d != nil {
		delay = d.Duration
	}
	p, err := plan.Build(planInput(policy, delay, endpoints))
	return p, err == nil, err
}
