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

package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tailcut/tailcut/test/envtestutil"
)

// Pod Security labels of every namespace the tests install into: the API
// server's PodSecurity admission rejects pods that are not "restricted", and
// warns about workloads (Deployments, Jobs, ...) whose pod template is not.
var restricted = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
	"pod-security.kubernetes.io/warn":            "restricted",
	"pod-security.kubernetes.io/warn-version":    "latest",
}

const fieldOwner = client.FieldOwner("tailcut-chart-test")

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// createNamespace creates (for real) a namespace that enforces Pod Security
// "restricted", with extra labels merged in.
func createNamespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for k, v := range restricted {
		ns.Labels[k] = v
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if err := k8s.Create(ctx(t), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// dryRunApply applies every object with server-side apply and dryRun=All, and
// creates a Pod from every pod template with dryRun=All, so that the Pod
// Security admission judges each pod spec. Any error or warning fails.
func dryRunApply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	warnings.take()
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue // created by the caller, for real
		}
		err := k8s.Apply(ctx(t), client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			fieldOwner, client.ForceOwnership, client.DryRunAll)
		if err != nil {
			t.Errorf("server-side apply (dry run) of %s: %v", ref(o), err)
		}
		if w := warnings.take(); len(w) > 0 {
			t.Errorf("the API server warned about %s:\n  %s", ref(o), strings.Join(w, "\n  "))
		}
		pod, err := podFromTemplate(o)
		if err != nil {
			t.Errorf("%s: %v", ref(o), err)
			continue
		}
		if pod == nil {
			continue
		}
		if err := k8s.Create(ctx(t), pod, client.DryRunAll); err != nil {
			t.Errorf("a Pod from the template of %s is not admitted: %v", ref(o), err)
		}
		if w := warnings.take(); len(w) > 0 {
			t.Errorf("the API server warned about the Pod of %s:\n  %s", ref(o), strings.Join(w, "\n  "))
		}
	}
}

// podFromTemplate returns the Pod a workload controller would create, or nil
// for objects without a pod template.
func podFromTemplate(o *unstructured.Unstructured) (*corev1.Pod, error) {
	var tmpl corev1.PodTemplateSpec
	var typed any
	switch o.GetKind() {
	case "Deployment":
		typed = &appsv1.Deployment{}
	case "StatefulSet":
		typed = &appsv1.StatefulSet{}
	case "DaemonSet":
		typed = &appsv1.DaemonSet{}
	case "Job":
		typed = &batchv1.Job{}
	case "CronJob":
		typed = &batchv1.CronJob{}
	case "Pod":
		typed = &corev1.Pod{}
	default:
		return nil, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	switch w := typed.(type) {
	case *appsv1.Deployment:
		tmpl = w.Spec.Template
	case *appsv1.StatefulSet:
		tmpl = w.Spec.Template
	case *appsv1.DaemonSet:
		tmpl = w.Spec.Template
	case *batchv1.Job:
		tmpl = w.Spec.Template
	case *batchv1.CronJob:
		tmpl = w.Spec.JobTemplate.Spec.Template
	case *corev1.Pod:
		tmpl = corev1.PodTemplateSpec{ObjectMeta: w.ObjectMeta, Spec: w.Spec}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        strings.ToLower(o.GetKind()) + "-" + o.GetName(),
			Namespace:   o.GetNamespace(),
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}, nil
}

// Everything the chart renders, for every value set, is accepted by the API
// server, and every pod spec passes Pod Security "restricted".
func TestHelmObjectsApplyToTheAPIServer(t *testing.T) {
	for _, v := range valueSets {
		t.Run(v.name, func(t *testing.T) {
			createNamespace(t, v.namespace(), nil)
			dryRunApply(t, render(t, v))
			// Dry run means nothing was stored.
			var deployments appsv1.DeploymentList
			if err := k8s.List(ctx(t), &deployments, client.InNamespace(v.namespace())); err != nil {
				t.Fatal(err)
			}
			if len(deployments.Items) != 0 {
				t.Errorf("the dry run stored %d Deployments", len(deployments.Items))
			}
		})
	}
}

// Everything `make deploy` applies (with config/prometheus included) is
// accepted, and its Namespace enforces Pod Security "restricted" itself.
func TestKustomizeObjectsApplyToTheAPIServer(t *testing.T) {
	objs := kustomizeDefault(t, true)
	nss := byKind(objs, "Namespace")
	if len(nss) != 1 {
		t.Fatalf("config/default has %d Namespaces, want 1", len(nss))
	}
	ns := nss[0]
	for k, v := range map[string]string{"pod-security.kubernetes.io/enforce": "restricted"} {
		if ns.GetLabels()[k] != v {
			t.Errorf("Namespace %s: label %s=%q, want %q", ns.GetName(), k, ns.GetLabels()[k], v)
		}
	}
	if err := k8s.Apply(ctx(t), client.ApplyConfigurationFromUnstructured(ns.DeepCopy()), fieldOwner, client.ForceOwnership); err != nil {
		t.Fatalf("applying %s: %v", ref(ns), err)
	}
	// Created with config/'s labels only, so the Pod Security checks below come
	// from what config/ declares.
	dryRunApply(t, objs)

	// The samples, as a user applies them next to the operator.
	createNamespace(t, "chart-samples", nil)
	samples := decodeObjects(t, execute(t, tool(t, "kustomize"), "build", repo("config", "samples")))
	for _, s := range samples {
		s.SetNamespace("chart-samples")
	}
	dryRunApply(t, samples)
}

// The checks above have teeth: in these namespaces the API server really
// rejects a pod that is not "restricted", and warns about such a Deployment.
func TestPodSecurityAdmissionIsEnforced(t *testing.T) {
	createNamespace(t, "chart-pss-control", nil)
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "example", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
	}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: "chart-pss-control"}, Spec: spec}
	err := k8s.Create(ctx(t), pod, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity \"restricted:latest\"") {
		t.Fatalf("a privileged pod was not rejected by Pod Security admission: %v", err)
	}
	warnings.take()
	labels := map[string]string{"app": "x"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: "chart-pss-control"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if err := k8s.Create(ctx(t), deploy, client.DryRunAll); err != nil {
		t.Fatalf("creating the Deployment (dry run): %v", err)
	}
	if w := strings.Join(warnings.take(), "\n"); !strings.Contains(w, "would violate PodSecurity") {
		t.Fatalf("no Pod Security warning for a privileged Deployment; warnings: %q", w)
	}
}

// helm install --dry-run=server against the API server: Helm discovers
// monitoring.coreos.com/v1 itself (so the ServiceMonitors render without
// --api-versions), and the NOTES render.
func TestHelmInstallDryRunAgainstTheAPIServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := envtestutil.WriteKubeconfig(testEnv, "helm", path); err != nil {
		t.Fatal(err)
	}
	createNamespace(t, "chart-install", nil)
	out := string(execute(t, tool(t, "helm"), "install", "tailcut", repo("charts", "tailcut"), "--kubeconfig", path,
		"--namespace", "chart-install", "--dry-run=server", "--set", "demo.enabled=true"))
	for _, want := range []string{"kind: ServiceMonitor", "kind: PrometheusRule", "NOTES:",
		"NOTE: operator.prometheusURL is empty", "helm test tailcut -n chart-install"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install --dry-run=server output lacks %q", want)
		}
	}
	if strings.Contains(out, "does not serve monitoring.coreos.com/v1") {
		t.Errorf("Helm did not see the Prometheus Operator API of the server")
	}
	if t.Failed() || os.Getenv("SHOW_NOTES") != "" {
		t.Logf("output:\n%s", out)
	}
}
