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
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tailcut/tailcut/controllers/plan"
)

// VirtualServiceListGVK is what retriesOverridden lists.
var VirtualServiceListGVK = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualServiceList"}

// retriesOverridden names the VirtualServices in the policy's namespace that
// set retries on the Service's host, and says what the hedge does to them:
// the MERGE patch replaces the route's retry_on, num_retries and
// per_try_timeout, so their retries give way to the hedge. "" when none does.
func retriesOverridden(ctx context.Context, r client.Reader, p plan.RoutePlan) (string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(VirtualServiceListGVK)
	if err := r.List(ctx, list, client.InNamespace(p.Namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return "", nil
		}
		return "", fmt.Errorf("listing VirtualServices in %s: %w", p.Namespace, err)
	}
	names := []string{p.Service, p.Service + "." + p.Namespace, p.Service + "." + p.Namespace + ".svc", Host(p.Service, p.Namespace)}
	var found []string
	for _, vs := range list.Items {
		hosts, _, _ := unstructured.NestedStringSlice(vs.Object, "spec", "hosts")
		if !slices.ContainsFunc(hosts, func(h string) bool { return slices.Contains(names, h) }) {
			continue
		}
		routes, _, _ := unstructured.NestedSlice(vs.Object, "spec", "http")
		for _, rt := range routes {
			m, _ := rt.(map[string]any)
			retries, ok := m["retries"].(map[string]any)
			if !ok {
				continue
			}
			found = append(found, fmt.Sprintf("%s (attempts %v, retryOn %v, perTryTimeout %v)", vs.GetName(), retries["attempts"], orNone(retries["retryOn"]), orNone(retries["perTryTimeout"])))
			break
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	if p.Hedge == nil {
		// Hedging off: the patch leaves the routes' retries alone.
		return "", nil
	}
	return fmt.Sprintf("VirtualService %s sets retries on %s; the hedge replaces retry_on, num_retries and per_try_timeout on its routes: %s. "+
		"Remove the retries from the VirtualService, or list the conditions you need in spec.retryOn",
		strings.Join(found, ", "), Host(p.Service, p.Namespace), RetriesKept(p)), nil
}

func orNone(v any) any {
	if v == nil {
		return "unset"
	}
	return v
}
