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

// Package controllers reconciles HedgePolicies: it checks the target, asks the
// estimator for a delay, builds the route plan, hands it to the publisher for the
// policy's target and writes one status patch with what happened and why.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/status"
	"github.com/tailcut/tailcut/controllers/target"
)

// HedgePolicyReconciler turns HedgePolicies into published route plans and status.
type HedgePolicyReconciler struct {
	client.Client
	Recorder  events.EventRecorder
	Estimator estimate.Estimator
	// Publishers holds one publisher per spec.publish.target. A target with no
	// publisher is reported as Programmed=False, never silently ignored.
	Publishers map[tailcutv1alpha1.PublishTarget]publish.Publisher
	// Owns are the kinds publishers write for a policy, owned by it (Istio's
	// EnvoyFilters): a change to one, or its deletion, reconciles the policy.
	Owns []client.Object
	// Notifications name policies whose Programmed changed because a proxy
	// connected, acknowledged or rejected their configuration (the xDS
	// server). Their reconcile reports it; the estimator answers with the
	// decision in force, taking a new one only when one is due.
	Notifications []<-chan event.GenericEvent
	// Evaluations name policies whose evaluation is due: the sampler read
	// new metrics for them. They, and the periodic requeues, are queued at
	// low priority, behind endpoint, Service and spec changes: a sampler tick
	// makes hundreds of policies due at once, and an EndpointSlice change
	// queued behind them reached Envoy 2 s late.
	Evaluations []<-chan event.GenericEvent
	// MaxConcurrentReconciles is the number of workers; default 8. A
	// reconcile never waits for Prometheus (the sampler reads it), so a few
	// workers carry a thousand policies.
	MaxConcurrentReconciles int
	// HostAliases resolves FQDN EndpointSlice addresses before DNS, like a hosts
	// file. Local stacks need it: the API server refuses loopback IPs in
	// EndpointSlices, so their slices name hosts that map to 127.0.0.1 here.
	HostAliases map[string][]string
	Clock       clock.PassiveClock

	// firstSeen is when this reconciler first reconciled each policy that
	// has no status yet (firstAckWait).
	firstSeen sync.Map // types.NamespacedName -> time.Time
}

// conflictRetry is when a reconcile whose status write met a newer policy
// runs again: the cache has usually caught up by then.
const conflictRetry = 50 * time.Millisecond

// +kubebuilder:rbac:groups=tailcut.io,resources=hedgepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=tailcut.io,resources=hedgepolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The metrics endpoint checks each scraper's token (main.go, --metrics-secure):
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Reconcile evaluates one policy and writes its status once.
func (r *HedgePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var policy tailcutv1alpha1.HedgePolicy
	if err := r.Get(ctx, req.NamespacedName, &policy); err != nil {
		if apierrors.IsNotFound(err) {
			// The policy is gone: hedging stops, traffic does not
			// (retireEverywhere). Publishers keep no state outside this
			// process except Istio EnvoyFilters, which carry an owner
			// reference and are garbage collected, so no finalizer is needed.
			forgetPolicy(req.Namespace, req.Name)
			r.firstSeen.Delete(req.NamespacedName)
			return ctrl.Result{}, r.retireEverywhere(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !policy.DeletionTimestamp.IsZero() {
		// Another finalizer holds the policy: it is going all the same.
		return ctrl.Result{}, r.retireEverywhere(ctx, req.NamespacedName)
	}
	now := r.Clock.Now()
	nowT := metav1.NewTime(now)
	outcome, requeue, evalErr := r.evaluate(ctx, &policy, nowT)
	next := policy.Status.DeepCopy()
	next.ObservedGeneration = policy.Generation
	if outcome != nil {
		computed := status.Compute(&policy, *outcome, nowT)
		next = &computed
	}
	recordPolicy(&policy, next)
	for _, pub := range r.Publishers {
		if w, ok := pub.(publish.SyncWaiter); ok {
			w.Reconciled(req.NamespacedName)
		}
	}

	if wait := r.firstAckWait(&policy, next, now); wait > 0 && evalErr == nil {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.patchStatus(ctx, &policy, next); apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, evalErr
	} else if err != nil {
		return ctrl.Result{}, errors.Join(evalErr, err)
	}
	// A publish failure is returned so controller-runtime backs off; everything
	// about metrics is in the status and only asks for the next evaluation.
	return ctrl.Result{RequeueAfter: requeue, Priority: ptr.To(handler.LowPriority)}, evalErr
}

// evaluate resolves the policy's target, decides its delay and publishes
// its plan, and says what it found. It returns when to evaluate again, and an
// error only for failures worth a backoff retry; a nil outcome means an API
// read failed before anything was learned.
func (r *HedgePolicyReconciler) evaluate(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, now metav1.Time) (*status.Outcome, time.Duration, error) {
	key := client.ObjectKeyFromObject(policy)
	interval := policy.Spec.EffectiveEvaluationInterval()
	publishTarget := policy.Spec.EffectivePublishTarget()

	tgt, err := r.targets().Resolve(ctx, policy)
	if err != nil {
		return nil, 0, err
	}
	if tgt.Reason != "" {
		o := &status.Outcome{NotAccepted: tgt.Reason, NotAcceptedMessage: tgt.Message}
		if tgt.Reason == tailcutv1alpha1.ReasonConflicted {
			// The older policy routes the Service port.
			return o, interval, r.removeEverywhere(ctx, key, "")
		}
		// The target Service or port is gone, perhaps for a moment (a
		// Service re-created): the route stays a while, unhedged.
		return o, interval, r.retireEverywhere(ctx, key)
	}

	o := &status.Outcome{}
	if o.Estimate, err = r.Estimator.Estimate(ctx, policy, now.Time); err != nil {
		// The route stays, unhedged (the delay is 0).
		o.InvalidQuery, o.Estimate = err, estimate.Result{}
	}
	p, err := tgt.Plan(policy, o.Estimate.Delay, o.Estimate.SlowEndpoints)
	if err != nil {
		o.PlanError = err
		return o, interval, nil
	}
	publishErr := r.publishTo(ctx, publishTarget, policy, o, p)
	o.NoEndpoints = len(p.Endpoints) == 0
	// The policy lives in one publisher at a time: after a switch of
	// publish.target, the old one withdraws it.
	return o, interval, errors.Join(publishErr, r.removeEverywhere(ctx, key, publishTarget))
}

// publishTo hands the plan to the target's publisher and records the outcome.
// An operator without that publisher says so; a publisher's error is both in
// the outcome and returned, unless the policy is one the publisher cannot
// express (publish.UnpublishableError): that is in the outcome only.
func (r *HedgePolicyReconciler) publishTo(ctx context.Context, publishTarget tailcutv1alpha1.PublishTarget, policy *tailcutv1alpha1.HedgePolicy,
	o *status.Outcome, p plan.RoutePlan) error {
	pub := r.Publishers[publishTarget]
	if pub == nil {
		o.PublisherAbsent = publishTarget
		return nil
	}
	if err := pub.Publish(ctx, ownerOf(policy), p); err != nil {
		o.PublishError = err
		if unpublishable := new(publish.UnpublishableError); errors.As(err, &unpublishable) {
			return nil
		}
		return err
	}
	ps := pub.Status(client.ObjectKeyFromObject(policy))
	o.Program = &ps
	return nil
}

// ownerOf is the policy as publishers know it.
func ownerOf(policy *tailcutv1alpha1.HedgePolicy) publish.Owner {
	o := publish.Owner{Key: client.ObjectKeyFromObject(policy), UID: policy.UID}
	if policy.Spec.Publish.Istio != nil {
		o.IstioContext = string(policy.Spec.Publish.Istio.Context)
	}
	return o
}

// targets resolves policies' targets through the reconciler's client.
func (r *HedgePolicyReconciler) targets() *target.Resolver {
	return &target.Resolver{Reader: r.Client, HostAliases: r.HostAliases}
}

// firstAckGrace is how long a new policy's first status may wait for the
// proxies' ACK, from its first reconcile.
const firstAckGrace = 2 * time.Second

// firstAckWait is how long to hold back the first status of a new policy
// whose only news is that its push is on the way (Programmed=False,
// Pending): the ACK's event usually comes within a second, and the policy
// then gets one status write instead of two. With 1,000 policies applied at
// once the second writes alone took 5 s at 200 writes a second. The grace
// runs from the first reconcile, not from creation: in that apply a policy
// waited up to 4 s in the work queue, and counted from creation its grace
// was over before it was first reconciled. 0: write now.
func (r *HedgePolicyReconciler) firstAckWait(policy *tailcutv1alpha1.HedgePolicy, next *tailcutv1alpha1.HedgePolicyStatus, now time.Time) time.Duration {
	if len(policy.Status.Conditions) > 0 {
		return 0
	}
	c := meta.FindStatusCondition(next.Conditions, tailcutv1alpha1.ConditionProgrammed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tailcutv1alpha1.ReasonPending {
		return 0
	}
	seen, _ := r.firstSeen.LoadOrStore(client.ObjectKeyFromObject(policy), now)
	return max(0, firstAckGrace-now.Sub(seen.(time.Time)))
}

// patchStatus writes the status once, and not at all when nothing changed,
// then records an Event for each condition transition worth one. The write
// carries the resourceVersion read: a policy read from a cache that has not
// seen this reconciler's last write yet (a proxy's ACK comes milliseconds
// after it) is refused with a conflict, rather than its older status,
// transition times and events written again.
func (r *HedgePolicyReconciler) patchStatus(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, next *tailcutv1alpha1.HedgePolicyStatus) error {
	if apiequality.Semantic.DeepEqual(&policy.Status, next) {
		return nil
	}
	base := policy.DeepCopy()
	policy.Status = *next
	if err := r.Status().Patch(ctx, policy, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching status: %w", err)
	}
	r.firstSeen.Delete(client.ObjectKeyFromObject(policy))
	r.recordTransitions(policy, base.Status.Conditions, next.Conditions)
	return nil
}

// recordTransitions records an Event for each condition transition worth one
// (status.Transitions): a Warning for a problem, Normal for its end.
func (r *HedgePolicyReconciler) recordTransitions(policy *tailcutv1alpha1.HedgePolicy, prev, next []metav1.Condition) {
	if r.Recorder == nil {
		return
	}
	for _, t := range status.Transitions(prev, next) {
		eventType := corev1.EventTypeNormal
		if t.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(policy, nil, eventType, t.Reason, t.Type, "%s=%s: %s", t.Type, t.Status, status.Truncate(t.Message, 900))
	}
}

// removeEverywhere withdraws the policy from every publisher except keep ("":
// from all).
func (r *HedgePolicyReconciler) removeEverywhere(ctx context.Context, key types.NamespacedName, keep tailcutv1alpha1.PublishTarget) error {
	var errs []error
	for target, pub := range r.Publishers {
		if pub == nil || target == keep {
			continue
		}
		if err := pub.Remove(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("removing %s from %s: %w", key, target, err))
		}
	}
	return errors.Join(errs...)
}

// retireEverywhere stops the policy's hedging everywhere: publishers whose
// proxies carry the traffic on the policy's route alone keep it a while,
// unhedged (publish.Retirer); the others remove the policy.
func (r *HedgePolicyReconciler) retireEverywhere(ctx context.Context, key types.NamespacedName) error {
	var errs []error
	for target, pub := range r.Publishers {
		if pub == nil {
			continue
		}
		var err error
		if retirer, ok := pub.(publish.Retirer); ok {
			err = retirer.Retire(ctx, key)
		} else {
			err = pub.Remove(ctx, key)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("retiring %s from %s: %w", key, target, err))
		}
	}
	return errors.Join(errs...)
}

// SetupWithManager registers the reconciler and the watches that lead back to
// policies: their target Services and EndpointSlices. The manager's policies
// must be indexed by target (target.IndexPolicies).
func (r *HedgePolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Estimator == nil {
		r.Estimator = estimate.StaticOnly{}
	}
	policies := target.Mappings{Reader: r.Client}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&tailcutv1alpha1.HedgePolicy{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(policies.ForService)).
		// A policy that appears, changes target or goes can settle a conflict
		// of the others on its Service.
		// Not on status writes: the reconciler's own would wake it again.
		Watches(&tailcutv1alpha1.HedgePolicy{}, handler.EnqueueRequestsFromMapFunc(policies.BesidePolicy),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(policies.ForEndpointSlice))
	for _, o := range r.Owns {
		b = b.Owns(o)
	}
	for _, ch := range r.Notifications {
		b = b.WatchesRawSource(source.Channel(ch, &handler.EnqueueRequestForObject{}))
	}
	for _, ch := range r.Evaluations {
		b = b.WatchesRawSource(source.Channel(ch, enqueueAtLowPriority()))
	}
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 8
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: workers}).Named("hedgepolicy").Complete(r)
}
