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
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// FieldManager owns the fields tailcut applies (server-side apply).
const FieldManager = "tailcut"

// Publisher writes, for each policy, one EnvoyPatchPolicy per Envoy Gateway
// Gateway whose HTTPRoutes send to the policy's Service port, with
// server-side apply, and one hedge account patch (AccountPolicy) per such
// Gateway, kept while a policy patches it. A patch in the policy's own
// namespace is owned by the policy (deleting the policy deletes it); one in a
// Gateway's namespace elsewhere is found by its labels and removed by Remove.
type Publisher struct {
	// Client writes patch policies and lists them live where a stale list
	// would drop a Gateway's account. Reader reads Gateway API objects and
	// patch policies from the manager's cache.
	Client client.Client
	Reader client.Reader
	// AccountModule is the hedge account's Proxy-Wasm module, inlined in the
	// account patch (istio.LoadAccountModule reads and checks it).
	AccountModule []byte

	mu        sync.Mutex
	published map[types.NamespacedName]published
	accounts  map[types.NamespacedName]accountMemo
}

// accountMemo is a Gateway's rendered account patch (accountPolicy).
type accountMemo struct {
	listeners string
	policy    *unstructured.Unstructured
	version   string
}

// published is what Publish last did for a policy.
type published struct {
	version  string
	gateways int32
	detail   string
}

var _ publish.Publisher = (*Publisher)(nil)

// Publish applies the policy's patch on every Gateway that routes to its
// Service, the account patch on each of them, and deletes the policy's
// patches on Gateways that no longer do. A plan without a hedge keeps a
// patch with the routes' stat prefix only (PatchPolicy).
func (p *Publisher) Publish(ctx context.Context, owner publish.Owner, rp plan.RoutePlan) error {
	key := owner.KeyOf(rp)
	if rp.Match.PathPrefix != "/" {
		return &publish.UnpublishableError{Err: ErrPathPrefix}
	}
	if rp.Affinity != nil {
		return &publish.UnpublishableError{Err: ErrAffinity}
	}
	routes, err := p.discover(ctx, rp)
	if err != nil {
		return err
	}
	if len(routes.Attachments) == 0 {
		msg := fmt.Sprintf("no HTTPRoute on an Envoy Gateway Gateway sends to Service %s/%s port %d", rp.Namespace, rp.Service, rp.Port)
		if len(routes.Ignored) > 0 {
			msg += " (" + strings.Join(routes.Ignored, "; ") + ")"
		}
		// Patches left from an earlier attachment would hedge routes the
		// policy no longer names.
		return errors.Join(&publish.UnpublishableError{Err: errors.New(msg)}, p.Remove(ctx, key))
	}
	var (
		versions []string
		keep     = map[types.NamespacedName]bool{}
		rules    []string
	)
	for _, a := range routes.Attachments {
		u, err := PatchPolicy(rp, a)
		if err != nil {
			return &publish.UnpublishableError{Err: err}
		}
		// The account first: a hedged route whose account is missing
		// would hedge without a budget.
		if err := p.ensureAccount(ctx, a.Gateway); err != nil {
			return err
		}
		version, err := specHash(u)
		if err != nil {
			return err
		}
		if err := p.apply(ctx, u, version, owner); err != nil {
			return err
		}
		keep[client.ObjectKeyFromObject(u)] = true
		versions = append(versions, version)
		for _, r := range a.Rules {
			rules = append(rules, fmt.Sprintf("%s on %s", r.Cluster, RouteConfigName(a.Gateway.Key.Namespace, a.Gateway.Key.Name, r.Listener)))
		}
	}
	if err := p.removeExcept(ctx, key, keep); err != nil {
		return err
	}
	verb := "hedge"
	if rp.Hedge == nil {
		verb = "with hedging off, give a stat prefix (for the estimator) to"
	}
	detail := fmt.Sprintf("%d EnvoyPatchPolicy (%s) %s %s; Envoy Gateway applies them", len(keep), strings.Join(keyNames(keep), ", "), verb, strings.Join(rules, ", "))
	if len(routes.Ignored) > 0 {
		detail += "; not patched: " + strings.Join(routes.Ignored, "; ")
	}
	p.remember(key, published{version: hashOf(versions), gateways: int32(len(keep)), detail: detail})
	return nil
}

// Remove deletes every patch tailcut wrote for the policy, then the account
// patches of the Gateways no policy patches any more.
func (p *Publisher) Remove(ctx context.Context, key types.NamespacedName) error {
	p.mu.Lock()
	delete(p.published, key)
	p.mu.Unlock()
	return p.removeExcept(ctx, key, nil)
}

// Status reports the patches as programmed once the API server holds their
// current version: Envoy Gateway takes them from there, and says in the
// patch policies' status whether every patch applied.
func (p *Publisher) Status(key types.NamespacedName) publish.ProgramStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	pub, ok := p.published[key]
	if !ok {
		return publish.ProgramStatus{}
	}
	n := max(pub.gateways, 1)
	return publish.ProgramStatus{Connected: n, Programmed: n, Serving: n, Version: pub.version, Detail: pub.detail}
}

// discover reads the Gateway API objects and finds where they route to the
// plan's Service port.
func (p *Publisher) discover(ctx context.Context, rp plan.RoutePlan) (Routes, error) {
	classes := map[string]string{}
	list, err := p.list(ctx, p.Reader, GatewayClassGVK)
	if err != nil {
		return Routes{}, err
	}
	for _, c := range list {
		classes[c.GetName()], _, _ = unstructured.NestedString(c.Object, "spec", "controllerName")
	}
	gateways := map[types.NamespacedName]Gateway{}
	if list, err = p.list(ctx, p.Reader, GatewayGVK); err != nil {
		return Routes{}, err
	}
	for _, g := range list {
		if gw, ok := GatewayOf(g, classes); ok {
			gateways[gw.Key] = gw
		}
	}
	if list, err = p.list(ctx, p.Reader, HTTPRouteGVK); err != nil {
		return Routes{}, err
	}
	return Attachments(list, gateways, rp.Namespace, rp.Service, rp.Port), nil
}

// apply writes a patch policy (u, whose content hash is version) unless the
// cluster holds this version.
func (p *Publisher) apply(ctx context.Context, u *unstructured.Unstructured, version string, owner publish.Owner) error {
	existing, err := p.get(ctx, client.ObjectKeyFromObject(u))
	if err != nil {
		return err
	}
	if existing != nil && existing.GetLabels()[LabelManagedBy] != ManagedBy {
		return &publish.UnpublishableError{Err: fmt.Errorf("EnvoyPatchPolicy %s/%s exists and is not tailcut's (no label %s=%s); tailcut leaves it alone: rename or delete it",
			existing.GetNamespace(), existing.GetName(), LabelManagedBy, ManagedBy)}
	}
	if existing != nil && existing.GetAnnotations()[AnnotationVersion] == version {
		return nil
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationVersion] = version
	u.SetAnnotations(annotations)
	if owner.UID != "" && u.GetNamespace() == owner.Key.Namespace && u.GetLabels()[LabelRole] == RolePolicy {
		u.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: tailcutv1alpha1.GroupVersion.String(), Kind: "HedgePolicy", Name: owner.Key.Name, UID: owner.UID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
		}})
	}
	if err := p.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("the EnvoyPatchPolicy API (gateway.envoyproxy.io/v1alpha1) is not installed: is Envoy Gateway in this cluster? %w", err)
		}
		return fmt.Errorf("applying EnvoyPatchPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// ensureAccount applies the Gateway's account patch unless it holds this
// version.
func (p *Publisher) ensureAccount(ctx context.Context, gw Gateway) error {
	u, version, err := p.accountPolicy(gw)
	if err != nil {
		return err
	}
	return p.apply(ctx, u, version, publish.Owner{})
}

// accountPolicy is AccountPolicy for the Gateway and its version, rendered
// once per Gateway and set of listeners: it carries the module (over 100 KB
// in base64 per listener), and every evaluation of every policy on the
// Gateway asks for it.
func (p *Publisher) accountPolicy(gw Gateway) (*unstructured.Unstructured, string, error) {
	if !bytes.HasPrefix(p.AccountModule, []byte("\x00asm")) {
		return nil, "", fmt.Errorf("the Envoy Gateway publisher has no hedge account module")
	}
	listeners := strings.Join(gw.Listeners, ",")
	p.mu.Lock()
	memo, ok := p.accounts[gw.Key]
	p.mu.Unlock()
	if !ok || memo.listeners != listeners {
		u, err := AccountPolicy(gw, p.AccountModule)
		if err != nil {
			return nil, "", err
		}
		version, err := specHash(u)
		if err != nil {
			return nil, "", err
		}
		memo = accountMemo{listeners: listeners, policy: u, version: version}
		p.mu.Lock()
		if p.accounts == nil {
			p.accounts = map[types.NamespacedName]accountMemo{}
		}
		p.accounts[gw.Key] = memo
		p.mu.Unlock()
	}
	return memo.policy.DeepCopy(), memo.version, nil
}

// removeExcept deletes the policy's patches but those in keep, then the
// account patch of each Gateway that lost its last policy patch.
func (p *Publisher) removeExcept(ctx context.Context, key types.NamespacedName, keep map[types.NamespacedName]bool) error {
	mine, err := p.list(ctx, p.Reader, PatchPolicyGVK, client.MatchingLabels{
		LabelManagedBy: ManagedBy, LabelRole: RolePolicy, LabelPolicy: labelValue(key.Name), LabelPolicyNamespace: labelValue(key.Namespace),
	})
	if err != nil {
		return err
	}
	var errs []error
	released := map[types.NamespacedName]bool{}
	for i := range mine {
		u := &mine[i]
		if keep[client.ObjectKeyFromObject(u)] || u.GetAnnotations()[AnnotationPolicy] != key.String() {
			continue
		}
		if err := p.Client.Delete(ctx, u, client.Preconditions{UID: ptrTo(u.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting EnvoyPatchPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err))
			continue
		}
		gw, _, _ := unstructured.NestedString(u.Object, "spec", "targetRef", "name")
		released[types.NamespacedName{Namespace: u.GetNamespace(), Name: gw}] = true
	}
	for gw := range released {
		errs = append(errs, p.releaseAccount(ctx, gw))
	}
	return errors.Join(errs...)
}

// releaseAccount deletes a Gateway's account patch when no policy patches
// the Gateway any more. It lists live, not from the cache: a cache that has
// not yet seen another policy's new patch would take the account from it.
func (p *Publisher) releaseAccount(ctx context.Context, gw types.NamespacedName) error {
	patches, err := p.list(ctx, p.Client, PatchPolicyGVK, client.InNamespace(gw.Namespace), client.MatchingLabels{LabelManagedBy: ManagedBy, LabelRole: RolePolicy})
	if err != nil {
		return err
	}
	for _, u := range patches {
		if target, _, _ := unstructured.NestedString(u.Object, "spec", "targetRef", "name"); target == gw.Name && u.GetDeletionTimestamp() == nil {
			return nil
		}
	}
	p.mu.Lock()
	delete(p.accounts, gw)
	p.mu.Unlock()
	account, err := p.get(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: AccountPolicyName(gw.Name)})
	if err != nil || account == nil || account.GetLabels()[LabelManagedBy] != ManagedBy {
		return err
	}
	if err := p.Client.Delete(ctx, account, client.Preconditions{UID: ptrTo(account.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the hedge account EnvoyPatchPolicy %s/%s: %w", gw.Namespace, AccountPolicyName(gw.Name), err)
	}
	return nil
}

// list lists one kind; an API that is not installed lists nothing.
func (p *Publisher) list(ctx context.Context, r client.Reader, gvk schema.GroupVersionKind, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	err := r.List(ctx, l, opts...)
	switch {
	case meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	return l.Items, nil
}

func (p *Publisher) get(ctx context.Context, key types.NamespacedName) (*unstructured.Unstructured, error) {
	u := NewPatchPolicy()
	err := p.Reader.Get(ctx, key, u)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading EnvoyPatchPolicy %s: %w", key, err)
	}
	return u, nil
}

func (p *Publisher) remember(key types.NamespacedName, pub published) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.published == nil {
		p.published = map[types.NamespacedName]published{}
	}
	p.published[key] = pub
}

// specHash is the content hash of a patch policy's spec and labels.
func specHash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(map[string]any{"spec": u.Object["spec"], "labels": u.GetLabels()})
	if err != nil {
		return "", err
	}
	return hashOf([]string{string(b)}), nil
}

func hashOf(parts []string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}

func keyNames(keys map[types.NamespacedName]bool) []string {
	var names []string
	for k := range keys {
		names = append(names, k.String())
	}
	slices.Sort(names)
	return names
}

func ptrTo[T any](v T) *T { return &v }
