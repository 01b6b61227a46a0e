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
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/tailcut/tailcut/test/envtestutil"
)

// TestPublisherUnderOpenShiftsOwnerRules is #23's defect 9, on a real API
// server that runs the OwnerReferencesPermissionEnforcement admission plugin,
// as OpenShift does, with the operator as a user that has only the rights
// config/rbac grants it (the chart renders the same). The plugin lets an
// owner reference block its owner's deletion only for those who may update
// the owner's finalizers; without that right every EnvoyFilter was refused.
// The policy's name is the longest the API allows (253): the EnvoyFilter's
// name and its policy label were too long for it.
func TestPublisherUnderOpenShiftsOwnerRules(t *testing.T) {
	env, admin := startAPIServerWith(t, func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	})
	ctx := context.Background()
	const operator = "tailcut-operator"
	for _, file := range []string{"role.yaml", "istio_role.yaml"} {
		for _, role := range clusterRoles(t, filepath.Join(envtestutil.RepoRoot(), "config", "rbac", file)) {
			if err := admin.Create(ctx, &role); err != nil {
				t.Fatal(err)
			}
			binding := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role.Name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operator}},
			}
			if err := admin.Create(ctx, binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	user, err := env.AddUser(envtest.User{Name: operator}, nil)
	if err != nil {
		t.Fatal(err)
	}
	asOperator, err := client.New(user.Config(), client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	p, _ := mustLoad(t, "sidecar-get.yaml")
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}); err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("a", 120) + "." + strings.Repeat("b", 132)
	policy := istioPolicy(p.Namespace, name, p.Service, p.Port)
	if err := admin.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	p.Name = p.Namespace + "/" + name
	pub := &Publisher{Client: asOperator, Reader: asOperator, AccountModule: testModule}
	if err := pub.Publish(ctx, ownerOf(policy), p); err != nil {
		t.Fatalf("publishing as the operator: %v", err)
	}
	filter := NewEnvoyFilter()
	if err := admin.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: FilterName(name)}, filter); err != nil {
		t.Fatal(err)
	}
	refs := filter.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != policy.UID || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
		t.Errorf("owner references %+v, want the policy, blocking its deletion", refs)
	}
	if got := filter.GetAnnotations()[AnnotationPolicy]; got != name {
		t.Errorf("annotation %s = %q, want the policy's whole name", AnnotationPolicy, got)
	}
	if errs := validation.IsValidLabelValue(filter.GetLabels()[LabelPolicy]); len(errs) > 0 || filter.GetName() == FilterName(strings.Repeat("a", 120)+"."+strings.Repeat("c", 132)) {
		t.Errorf("label %q (%v), name %q: want a valid label and a name of this policy's own", filter.GetLabels()[LabelPolicy], errs, filter.GetName())
	}
	if err := pub.Remove(ctx, client.ObjectKeyFromObject(policy)); err != nil {
		t.Fatalf("removing as the operator: %v", err)
	}
}

// clusterRoles reads the ClusterRoles of a manifest file.
func clusterRoles(t *testing.T, path string) []rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var roles []rbacv1.ClusterRole
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if role.Kind == "ClusterRole" {
			roles = append(roles, role)
		}
	}
	if len(roles) == 0 {
		t.Fatalf("%s: no ClusterRole", path)
	}
	return roles
}
