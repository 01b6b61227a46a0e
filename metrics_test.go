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

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// TestMetricsNeedAnAllowedToken is #14's "metrics the kubebuilder v4 way"
// against a real API server: the operator's metrics are HTTPS, refused
// without a token (401) and to a token that may not get /metrics (403), and
// served to one bound to the metrics-reader rule. The certificate is the
// --metrics-cert-dir's, as the chart issues it, and the client checks it
// against the CA and the Service's name, as the chart's ServiceMonitor does.
func TestMetricsNeedAnAllowedToken(t *testing.T) {
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// The metrics server main.go configures, on port 0: the manager builds
	// its own from ctrl.Options.Metrics and tells no one the port it got, so
	// the test builds it, adds it to the manager and asks it.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	const serverName = "tailcut.tailcut-system.svc"
	ca := harness.NewCA(t, "tailcut-metrics-ca")
	certFile, keyFile := ca.Issue(t, "metrics", true, serverName)
	certDir := t.TempDir()
	for src, dst := range map[string]string{certFile: "tls.crt", keyFile: "tls.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := metricsserver.NewServer(metricsOptions("127.0.0.1:0", true, certDir), cfg, mgr.GetHTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	bound, ok := srv.(interface{ GetBindAddr() string })
	if !ok {
		t.Fatalf("the metrics server (%T) does not tell the address it bound", srv)
	}
	if err := mgr.Add(srv); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(50 * time.Millisecond) {
		if addr = bound.GetBindAddr(); addr == "" && time.Now().After(deadline) {
			t.Fatal("the metrics server did not listen within 30s")
		}
	}

	cs := kubernetes.NewForConfigOrDie(cfg)
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("someone")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The API server's RBAC authorizer learns of the binding from its own
	// informer, a moment after the create returns; the metrics filter asks
	// that authorizer (a SubjectAccessReview). Asking it the same question
	// here waits for exactly that, and no longer: checked at once, a reader
	// got 403 in CI once the server, with its certificate given, started
	// sooner than the binding was seen.
	eventuallyAllowed(ctx, t, cs, "system:serviceaccount:default:prometheus", "/metrics")

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}}
	get := func(scheme, bearer string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, err := get("https", ""); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		name, scheme, token string
		want                int
	}{
		{"no token", "https", "", http.StatusUnauthorized},
		{"a token that may not get /metrics", "https", stranger, http.StatusForbidden},
		{"a metrics reader's token", "https", reader, http.StatusOK},
	} {
		code, body, err := get(tc.scheme, tc.token)
		if err != nil || code != tc.want {
			t.Errorf("%s: %d (%v), want %d", tc.name, code, err, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: 200 without the operator's metrics", tc.name)
		}
	}
	if code, _, err := get("http", reader); err == nil && code == http.StatusOK {
		t.Error("metrics answered over plain HTTP")
	} else {
		t.Logf("plain HTTP refused: %d %v", code, err)
	}
}

// eventuallyAllowed waits until the API server's authorizer allows user to
// get path, or fails the test after 30s.
func eventuallyAllowed(ctx context.Context, t *testing.T, cs kubernetes.Interface, user, path string) {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:                  user,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may not get %s 30s after the binding: %v %+v", user, path, err, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
