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
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/publish"
)

// AccountFilterName is the EnvoyFilter that puts the hedge account into the
// sidecars and gateways of a namespace with Istio policies. FilterName's
// names all start with "tailcut-", so no policy's filter can take it.
const AccountFilterName = "hedge-account.tailcut.dev"

// LabelRole tells the account filter (RoleAccount) from the policies' own.
const (
	LabelRole   = "tailcut.dev/role"
	RoleAccount = "hedge-account"
)

// AccountFilter is the namespace's hedge account filter: the Proxy-Wasm
// module (module, inlined), before the router of every HTTP connection
// manager of the namespace's sidecars (SIDECAR_OUTBOUND) and gateways
// (GATEWAY). One filter serves every policy: it acts only on routes whose
// metadata carries an account's terms (envoyconf.HedgeAccount), which only
// the policies' hedged routes do, and passes other requests untouched. Every
// listener names the same VM, so a proxy compiles the module once.
//
// The module sees every stream end, so a request its client cancels gives
// back the hedges Envoy never sent (#23); a Lua filter, which Envoy runs only
// on answered requests, could not.
func AccountFilter(namespace string, module []byte) (*unstructured.Unstructured, error) {
	filter, err := envoyconf.MessageMap(envoyconf.HedgeAccountInlineFilter(module))
	if err != nil {
		return nil, err
	}
	patch := func(context string) map[string]any {
		return map[string]any{
			"applyTo": "HTTP_FILTER",
			"match": map[string]any{"context": context, "listener": map[string]any{"filterChain": map[string]any{"filter": map[string]any{
				"name":      "envoy.filters.network.http_connection_manager",
				"subFilter": map[string]any{"name": "envoy.filters.http.router"},
			}}}},
			"patch": map[string]any{"operation": "INSERT_BEFORE", "value": filter},
		}
	}
	u := NewEnvoyFilter()
	u.Object["spec"] = map[string]any{"configPatches": []any{patch("SIDECAR_OUTBOUND"), patch("GATEWAY")}}
	u.SetNamespace(namespace)
	u.SetName(AccountFilterName)
	u.SetLabels(map[string]string{LabelManagedBy: ManagedBy, LabelRole: RoleAccount})
	return u, nil
}

// ensureAccount makes the namespace's account filter current and owned by
// the policy, before the policy's routes ask for an account. The filter is
// owned by every policy that uses it, none of them its controller: the
// garbage collector deletes it with the last of them, and releaseAccount
// when the last one moves to another publisher. Writes carry the
// resourceVersion read, so two policies of a namespace, one publishing and
// one leaving, cannot lose each other's ownership.
func (p *Publisher) ensureAccount(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	want, version, err := p.accountFilter(key.Namespace)
	if err != nil {
		return err
	}
	have := NewEnvoyFilter()
	err = p.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: AccountFilterName}, have)
	if apierrors.IsNotFound(err) {
		want.SetAnnotations(map[string]string{AnnotationVersion: version})
		want.SetOwnerReferences([]metav1.OwnerReference{accountOwner(key.Name, uid)})
		if err := p.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating the hedge account EnvoyFilter %s/%s: %w", key.Namespace, AccountFilterName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the hedge account EnvoyFilter %s/%s: %w", key.Namespace, AccountFilterName, err)
	}
	if have.GetLabels()[LabelManagedBy] != ManagedBy {
		return &publish.UnpublishableError{Err: fmt.Errorf("EnvoyFilter %s/%s exists and is not tailcut's (no label %s=%s); tailcut needs the name for the hedge account: rename or delete it",
			key.Namespace, AccountFilterName, LabelManagedBy, ManagedBy)}
	}
	owners := have.GetOwnerReferences()
	owned := slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.UID == uid })
	if owned && have.GetAnnotations()[AnnotationVersion] == version {
		return nil
	}
	if !owned {
		owners = append(owners, accountOwner(key.Name, uid))
	}
	want.SetResourceVersion(have.GetResourceVersion())
	want.SetOwnerReferences(owners)
	want.SetAnnotations(map[string]string{AnnotationVersion: version})
	if err := p.Client.Update(ctx, want); err != nil {
		return fmt.Errorf("updating the hedge account EnvoyFilter %s/%s: %w", key.Namespace, AccountFilterName, err)
	}
	return nil
}

// accountFilter is AccountFilter for the namespace and its version. The
// filter is the same in every namespace but for its namespace, and large (the
// module twice, in base64): it is rendered and hashed once.
func (p *Publisher) accountFilter(namespace string) (*unstructured.Unstructured, string, error) {
	p.account.once.Do(func() {
		if !bytes.HasPrefix(p.AccountModule, []byte("\x00asm")) {
			p.account.err = fmt.Errorf("the Istio publisher has no hedge account module (LoadAccountModule)")
			return
		}
		if p.account.filter, p.account.err = AccountFilter("", p.AccountModule); p.account.err == nil {
			p.account.version, p.account.err = specHash(p.account.filter)
		}
	})
	if p.account.err != nil {
		return nil, "", p.account.err
	}
	u := p.account.filter.DeepCopy()
	u.SetNamespace(namespace)
	return u, p.account.version, nil
}

// releaseAccount drops the policy from the account filter's owners, and
// deletes the filter when no policy is left. It reads from Reader (the
// manager's cache): the reconciler removes every policy from the publishers
// it does not use on every reconcile, and those that never used the account
// cost no request to the API server. The write carries the resourceVersion
// read, so a stale cache fails it, and the reconcile is retried.
func (p *Publisher) releaseAccount(ctx context.Context, key types.NamespacedName) error {
	have := NewEnvoyFilter()
	err := p.Reader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: AccountFilterName}, have)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil || have.GetLabels()[LabelManagedBy] != ManagedBy {
		return err
	}
	owners := slices.DeleteFunc(have.GetOwnerReferences(), func(o metav1.OwnerReference) bool {
		return o.Kind == "HedgePolicy" && o.Name == key.Name
	})
	if len(owners) == len(have.GetOwnerReferences()) {
		return nil
	}
	if len(owners) == 0 {
		rv := have.GetResourceVersion()
		err = p.Client.Delete(ctx, have, client.Preconditions{ResourceVersion: &rv})
	} else {
		have.SetOwnerReferences(owners)
		err = p.Client.Update(ctx, have)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing the hedge account EnvoyFilter %s/%s: %w", key.Namespace, AccountFilterName, err)
	}
	return nil
}

// LoadAccountModule reads the hedge account's module from path (the operator
// image has it at /hedge-account.wasm) and checks that it is a WebAssembly
// module: a proxy given anything else would reject the listener it is in.
func LoadAccountModule(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the hedge account module: %w", err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		return nil, fmt.Errorf("the hedge account module %s is not WebAssembly (no \\0asm header)", path)
	}
	return b, nil
}

func accountOwner(policy string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: tailcutv1alpha1.GroupVersion.String(), Kind: "HedgePolicy", Name: policy, UID: uid}
}
