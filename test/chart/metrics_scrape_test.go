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
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The operator's ServiceMonitor scrapes with credentials the chart itself
// renders, and that fit together: a token Secret of a ServiceAccount bound
// to the metrics-reader role, and a CA that vouches for the certificate the
// operator serves, under the name the ServiceMonitor checks. No
// bearerTokenFile (Prometheus's own token, which newer Prometheus Operators
// deprecate) and no insecureSkipVerify. The kind e2e then checks that
// Prometheus, with no rights of its own to /metrics, scrapes it.
func TestOperatorMetricsScrapeCredentials(t *testing.T) {
	objs := render(t, valueSets[1]) // monitoring
	ns := valueSets[1].namespace()
	byName := func(kind, name string) *unstructured.Unstructured {
		for _, o := range byKind(objs, kind) {
			if o.GetName() == name {
				return o
			}
		}
		t.Fatalf("the chart renders no %s %s", kind, name)
		return nil
	}
	sm := byName("ServiceMonitor", "tailcut")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ep := endpoints[0].(map[string]any)
	for _, banned := range []string{"bearerTokenFile", "bearerTokenSecret"} {
		if _, ok := ep[banned]; ok {
			t.Errorf("the operator's endpoint uses %s", banned)
		}
	}
	if skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify"); skip || ep["scheme"] != "https" {
		t.Errorf("the operator's endpoint: scheme %v, insecureSkipVerify %v; want https, checked", ep["scheme"], skip)
	}

	// The token: a Secret of the ServiceAccount that may get /metrics.
	tokenName, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	if typ, _, _ := unstructured.NestedString(ep, "authorization", "type"); typ != "Bearer" || tokenName == "" {
		t.Fatalf("authorization %v, want a Bearer token from a Secret", ep["authorization"])
	}
	token := byName("Secret", tokenName)
	sa := token.GetAnnotations()["kubernetes.io/service-account.name"]
	if typ, _, _ := unstructured.NestedString(token.Object, "type"); typ != "kubernetes.io/service-account-token" || sa == "" {
		t.Fatalf("Secret %s: type %s for %q, want a service-account token", tokenName, typ, sa)
	}
	byName("ServiceAccount", sa)
	bound := false
	for _, b := range byKind(objs, "ClusterRoleBinding") {
		role, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, s := range subjects {
			s := s.(map[string]any)
			if s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == ns && role == "tailcut-metrics-reader" {
				bound = true
			}
		}
	}
	if !bound {
		t.Errorf("no ClusterRoleBinding gives %s/%s the metrics-reader role", ns, sa)
	}
	rules, _, _ := unstructured.NestedSlice(byName("ClusterRole", "tailcut-metrics-reader").Object, "rules")
	if len(rules) != 1 || !slices.Equal(stringsOf(rules[0], "nonResourceURLs"), []string{"/metrics"}) || !slices.Equal(stringsOf(rules[0], "verbs"), []string{"get"}) {
		t.Errorf("metrics-reader rules %v, want get on /metrics", rules)
	}

	// The certificate: the operator serves the Secret's tls.crt from
	// --metrics-cert-dir; its ca.crt vouches for it under serverName, the
	// operator Service's name.
	serverName, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	caSecret, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
	caKey, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "key")
	if svc := byName("Service", "tailcut"); serverName != svc.GetName()+"."+ns+".svc" {
		t.Errorf("serverName %q, want the operator Service's %s.%s.svc", serverName, svc.GetName(), ns)
	}
	data, _, _ := unstructured.NestedStringMap(byName("Secret", caSecret).Object, "data")
	decoded := map[string][]byte{}
	for k, v := range data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatal(err)
		}
		decoded[k] = b
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(decoded[caKey]) {
		t.Fatalf("Secret %s key %q holds no CA", caSecret, caKey)
	}
	block, _ := pem.Decode(decoded["tls.crt"])
	if block == nil {
		t.Fatalf("Secret %s holds no tls.crt", caSecret)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the metrics certificate does not verify as %s: %v", serverName, err)
	}
	operator := deployment(t, objs, "tailcut")
	if args := containerArgs(t, operator, "manager"); !slices.Contains(args, "--metrics-cert-dir=/etc/tailcut/metrics-tls") {
		t.Errorf("operator args lack --metrics-cert-dir: %v", args)
	}
	if mounted := mountedSecrets(t, operator, "manager"); mounted["/etc/tailcut/metrics-tls"] != caSecret {
		t.Errorf("/etc/tailcut/metrics-tls mounts %q, want Secret %s (%v)", mounted["/etc/tailcut/metrics-tls"], caSecret, mounted)
	}
}

// With plain HTTP metrics there is nothing to authenticate: no scraper, no
// certificate, no --metrics-cert-dir.
func TestPlainMetricsRenderNoCredentials(t *testing.T) {
	objs := render(t, valueSet{name: "metrics-plain", monitoring: true, set: []string{"operator.metricsSecure=false"}})
	for _, o := range objs {
		if strings.Contains(o.GetName(), "metrics-scraper") || strings.Contains(o.GetName(), "metrics-tls") {
			t.Errorf("%s rendered with plain HTTP metrics", ref(o))
		}
	}
	if args := containerArgs(t, deployment(t, objs, "tailcut"), "manager"); slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--metrics-cert-dir")
	}) {
		t.Errorf("--metrics-cert-dir with plain HTTP metrics: %v", args)
	}
}

func stringsOf(rule any, field string) []string {
	v, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), field)
	return v
}

// mountedSecrets maps a container's mount paths to the Secrets mounted there.
func mountedSecrets(t *testing.T, o *unstructured.Unstructured, container string) map[string]string {
	t.Helper()
	vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	secretOf := map[string]string{}
	for _, v := range vols {
		v := v.(map[string]any)
		name, _, _ := unstructured.NestedString(v, "secret", "secretName")
		secretOf[v["name"].(string)] = name
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	out := map[string]string{}
	for _, c := range containers {
		c := c.(map[string]any)
		if c["name"] != container {
			continue
		}
		mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
		for _, m := range mounts {
			m := m.(map[string]any)
			out[m["mountPath"].(string)] = secretOf[m["name"].(string)]
		}
	}
	return out
}
