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

package istio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
)

// FieldManager owns the fields tailcut applies (server-side apply).
const FieldManager = "tailcut"

// AnnotationVersion carries the content hash of the filter's spec: the
// policy's version for status, and how Publish knows there is nothing to
// apply.
const AnnotationVersion = "tailcut.dev/version"

// Publisher writes one EnvoyFilter per policy with server-side apply, owned by
// the policy (deleting the policy deletes it), and removes it when the policy
// goes or switches publisher. Beside them, one per namespace, it keeps the
// hedge account filter (AccountFilter) that the policies' routes need.
type Publisher struct {
	// Client writes EnvoyFilters. Reader reads them, from the manager's
	// cache, so that Remove costs nothing for the policies that never had one.
	Client client.Client
	Reader client.Reader
	// AccountModule is the hedge account's Proxy-Wasm module
	// (controllers/envoyconf/hedgeaccount), inlined in the account filter;
	// LoadAccountModule reads and checks it.
	AccountModule []byte

	// account is the account filter, rendered once (accountFilter).
	account struct {
		once    sync.Once
		filter  *unstructured.Unstructured
		version string
		err     error
	}

	mu        sync.Mutex
	published map[types.NamespacedName]published
}

// published is what Publish last saw of a policy.
type published struct {
	version    string
	overridden string // retriesOverridden's finding
	retries    string // RetriesKept
}

var _ publish.Publisher = (*Publisher)(nil)

// Publish applies the policy's EnvoyFilter unless the cluster already holds
// this version.
func (p *Publisher) Publish(ctx context.Context, owner publish.Owner, rp plan.RoutePlan) error {
	key := owner.KeyOf(rp)
	filter, err := EnvoyFilter(rp, contextOf(owner))
	if errors.Is(err, ErrPathPrefix) {
		return &publish.UnpublishableError{Err: err}
	}
	if err != nil {
		return fmt.Errorf("rendering the EnvoyFilter: %w", err)
	}
	version, err := specHash(filter)
	if err != nil {
		return err
	}
	overridden, err := retriesOverridden(ctx, p.Reader, rp)
	if err != nil {
		return err
	}
	existing, err := p.get(ctx, key)
	if err != nil {
		return err
	}
	if existing != nil && existing.GetLabels()[LabelManagedBy] != ManagedBy {
		return &publish.UnpublishableError{Err: fmt.Errorf("EnvoyFilter %s/%s exists and is not tailcut's (no label %s=%s); tailcut leaves it alone: rename or delete it",
			existing.GetNamespace(), existing.GetName(), LabelManagedBy, ManagedBy)}
	}
	// The account first: a hedged route whose account filter is missing
	// would hedge without a budget.
	if err := p.ensureAccount(ctx, key, owner.UID); err != nil {
		return err
	}
	if existing != nil && existing.GetAnnotations()[AnnotationVersion] == version {
		p.remember(key, version, overridden, RetriesKept(rp))
		return nil
	}
	annotations := filter.GetAnnotations()
	annotations[AnnotationVersion] = version
	filter.SetAnnotations(annotations)
	filter.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: tailcutv1alpha1.GroupVersion.String(), Kind: "HedgePolicy", Name: key.Name, UID: owner.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
	}})
	if err := p.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(filter), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("the EnvoyFilter API (networking.istio.io/v1alpha3) is not installed: is Istio in this cluster? %w", err)
		}
		return fmt.Errorf("applying EnvoyFilter %s/%s: %w", filter.GetNamespace(), filter.GetName(), err)
	}
	p.remember(key, version, overridden, RetriesKept(rp))
	return nil
}

// Remove deletes the policy's EnvoyFilter, if tailcut wrote one, then lets
// go of the namespace's account filter: its routes no longer need it.
func (p *Publisher) Remove(ctx context.Context, key types.NamespacedName) error {
	p.mu.Lock()
	delete(p.published, key)
	p.mu.Unlock()
	existing, err := p.get(ctx, key)
	if err != nil {
		return err
	}
	if existing != nil && existing.GetLabels()[LabelManagedBy] == ManagedBy { // else someone else's filter with our name
		err = p.Client.Delete(ctx, existing, client.Preconditions{UID: ptrTo(existing.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting EnvoyFilter %s/%s: %w", existing.GetNamespace(), existing.GetName(), err)
		}
	}
	return p.releaseAccount(ctx, key)
}

// Status reports the filter as programmed once the API server holds its
// current version. istiod takes it from there; its pushes to the sidecars are
// not acknowledged to tailcut.
func (p *Publisher) Status(key types.NamespacedName) publish.ProgramStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	pub, ok := p.published[key]
	if !ok {
		return publish.ProgramStatus{}
	}
	return publish.ProgramStatus{Connected: 1, Programmed: 1, Serving: 1, Version: pub.version, Overridden: pub.overridden, Retries: pub.retries,
		Detail: fmt.Sprintf("EnvoyFilter %s/%s holds version %s; istiod pushes it to the proxies", key.Namespace, FilterName(key.Name), pub.version)}
}

func (p *Publisher) remember(key types.NamespacedName, version, overridden, retries string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.published == nil {
		p.published = map[types.NamespacedName]published{}
	}
	p.published[key] = published{version: version, overridden: overridden, retries: retries}
}

func (p *Publisher) get(ctx context.Context, key types.NamespacedName) (*unstructured.Unstructured, error) {
	u := NewEnvoyFilter()
	err := p.Reader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: FilterName(key.Name)}, u)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading EnvoyFilter %s/%s: %w", key.Namespace, FilterName(key.Name), err)
	}
	return u, nil
}

func contextOf(owner publish.Owner) tailcutv1alpha1.IstioContext {
	if owner.IstioContext != "" {
		return tailcutv1alpha1.IstioContext(owner.IstioContext)
	}
	return tailcutv1alpha1.IstioSidecarOutbound
}

// specHash is the content hash of the filter's spec and labels.
func specHash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(map[string]any{"spec": u.Object["spec"], "labels": u.GetLabels()})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

func ptrTo[T any](v T) *T { return &v }
