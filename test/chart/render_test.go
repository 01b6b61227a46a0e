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
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// monitoringAPI is what --api-versions adds so that the chart renders its
// Prometheus Operator resources, as on a cluster that serves them.
const monitoringAPI = "monitoring.coreos.com/v1"

// valueSet is one way to install the chart.
type valueSet struct {
	name string
	// monitoring: the cluster serves monitoring.coreos.com/v1.
	monitoring bool
	set        []string
	// kinds maps a kind to how many objects of it the chart must render (0:
	// none).
	kinds map[string]int
}

var valueSets = []valueSet{
	{
		// No Prometheus Operator in the cluster: no ServiceMonitor, no rule, even
		// though monitoring.enabled is true by default.
		name: "default",
		kinds: map[string]int{"Deployment": 2, "Service": 3, "PodDisruptionBudget": 1, "ServiceAccount": 1,
			"ClusterRole": 4, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "ConfigMap": 3,
			"ServiceMonitor": 0, "PrometheusRule": 0, "StatefulSet": 0, "HedgePolicy": 0, "Job": 0, "Pod": 0,
			"CustomResourceDefinition": 1, "Secret": 3},
	},
	{
		name:       "monitoring",
		monitoring: true,
		// The operator's scraper: a ServiceAccount, its token, its binding.
		kinds: map[string]int{"Deployment": 2, "ServiceMonitor": 2, "PrometheusRule": 1, "ConfigMap": 3,
			"ServiceAccount": 2, "ClusterRoleBinding": 2, "Secret": 4},
	},
	{
		name:       "monitoring-off",
		monitoring: true,
		set:        []string{"monitoring.enabled=false", "dashboards.enabled=false"},
		kinds:      map[string]int{"Deployment": 2, "ServiceMonitor": 0, "PrometheusRule": 0, "ConfigMap": 0},
	},
	{
		name:       "proxy-off",
		monitoring: true,
		set:        []string{"proxy.enabled=false"},
		kinds:      map[string]int{"Deployment": 1, "Service": 1, "PodDisruptionBudget": 0, "ServiceMonitor": 1, "PrometheusRule": 1},
	},
	{
		name:       "demo",
		monitoring: true,
		set: []string{"demo.enabled=true", "operator.prometheusURL=http://prometheus-operated.monitoring:9090",
			"image.repository=tailcut", "image.tag=e2e", "demo.workload.image.tag=e2e"},
		kinds: map[string]int{"Deployment": 2, "StatefulSet": 1, "Service": 5, "HedgePolicy": 1, "Job": 1, "Pod": 1,
			"ConfigMap": 3, "ServiceMonitor": 3, "PrometheusRule": 1, "ServiceAccount": 3, "Role": 2, "RoleBinding": 2},
	},
	{
		// High availability and scheduling knobs, without the optional roles.
		name:       "ha",
		monitoring: true,
		set: []string{"operator.replicas=2", "proxy.replicas=3", "proxy.pdb.minAvailable=2",
			"operator.nodeSelector.kubernetes\\.io/os=linux", "proxy.tolerations[0].key=dedicated",
			"proxy.tolerations[0].operator=Exists", "proxy.tolerations[0].effect=NoSchedule",
			"rbac.aggregateToDefaultRoles=false", "serviceAccount.name=tailcut-operator",
			"monitoring.labels.release=kube-prometheus-stack"},
		kinds: map[string]int{"Deployment": 2, "ClusterRole": 2, "PodDisruptionBudget": 2, "ServiceMonitor": 2},
	},
	{
		// Istio mesh mode: one more ClusterRole and binding, for EnvoyFilters.
		name:  "istio",
		set:   []string{"istio.enabled=true"},
		kinds: map[string]int{"Deployment": 2, "ClusterRole": 5, "ClusterRoleBinding": 2},
	},
	{
		// helm template, Argo CD and Flux render with no cluster to ask:
		// monitoring.enabled=true renders the Prometheus Operator's objects
		// anyway, where auto (the default) drops them.
		name:  "monitoring-forced",
		set:   []string{"monitoring.enabled=true"},
		kinds: map[string]int{"ServiceMonitor": 2, "PrometheusRule": 1},
	},
	{
		// Envoy Gateway mode: one more ClusterRole and binding, for
		// EnvoyPatchPolicies.
		name:  "envoy-gateway",
		set:   []string{"envoyGateway.enabled=true"},
		kinds: map[string]int{"Deployment": 2, "ClusterRole": 5, "ClusterRoleBinding": 2},
	},
}

// namespace is where a value set is installed.
func (v valueSet) namespace() string { return "chart-" + v.name }

func (v valueSet) args() []string {
	var args []string
	if v.monitoring {
		args = append(args, "--api-versions", monitoringAPI)
	}
	for _, s := range v.set {
		args = append(args, "--set", s)
	}
	return args
}

var (
	renderedMu sync.Mutex
	rendered   = map[string][]*unstructured.Unstructured{}
)

// render runs helm template for a value set, once per test binary.
func render(t *testing.T, v valueSet) []*unstructured.Unstructured {
	t.Helper()
	renderedMu.Lock()
	defer renderedMu.Unlock()
	if objs, ok := rendered[v.name]; ok {
		return objs
	}
	args := append([]string{"template", "tailcut", repo("charts", "tailcut"), "--namespace", v.namespace(), "--include-crds"}, v.args()...)
	objs := decodeObjects(t, execute(t, tool(t, "helm"), args...))
	rendered[v.name] = objs
	return objs
}

func TestHelmLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, v := range valueSets {
		t.Run(v.name, func(t *testing.T) {
			// helm lint has no --api-versions: it lints the value set without the
			// Capabilities-gated monitoring objects, which render in the tests below.
			args := []string{"lint", "--strict", repo("charts", "tailcut"), "--namespace", v.namespace()}
			for _, s := range v.set {
				args = append(args, "--set", s)
			}
			out := execute(t, helm, args...)
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

func TestHelmTemplateRendersTheExpectedObjects(t *testing.T) {
	for _, v := range valueSets {
		t.Run(v.name, func(t *testing.T) {
			objs := render(t, v)
			for kind, want := range v.kinds {
				if got := len(byKind(objs, kind)); got != want {
					t.Errorf("%d %s objects, want %d", got, kind, want)
				}
			}
			for _, o := range objs {
				if o.GetNamespace() == "" && namespaced(o.GetKind()) {
					t.Errorf("%s has no namespace: every namespaced object must name the release namespace", ref(o))
				}
				if o.GetNamespace() != "" && o.GetNamespace() != v.namespace() {
					t.Errorf("%s is outside the release namespace %s", ref(o), v.namespace())
				}
			}
		})
	}
}

// namespaced reports whether the chart's kinds are namespaced.
func namespaced(kind string) bool {
	return !slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace"}, kind)
}

// The chart's values reach the objects: a few that are easy to get wrong.
func TestHelmValuesReachTheObjects(t *testing.T) {
	ha := render(t, valueSets[5])
	for _, d := range byKind(ha, "Deployment") {
		replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
		if strings.HasSuffix(d.GetName(), "-proxy") && replicas != 3 || !strings.HasSuffix(d.GetName(), "-proxy") && replicas != 2 {
			t.Errorf("%s has %d replicas", ref(d), replicas)
		}
	}
	for _, pdb := range byKind(ha, "PodDisruptionBudget") {
		minAvailable, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable")
		maxUnavailable, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "maxUnavailable")
		switch pdb.GetName() {
		case "tailcut-proxy":
			if minAvailable != int64(2) || maxUnavailable != nil {
				t.Errorf("proxy PDB minAvailable %v maxUnavailable %v, want 2 and none", minAvailable, maxUnavailable)
			}
		case "tailcut":
			// The operator, with two replicas: one at a time.
			if maxUnavailable != int64(1) || minAvailable != nil {
				t.Errorf("operator PDB minAvailable %v maxUnavailable %v, want none and 1", minAvailable, maxUnavailable)
			}
		default:
			t.Errorf("unexpected %s", ref(pdb))
		}
	}
	// The proxies spread over nodes, by their own labels.
	proxy := deployment(t, ha, "tailcut-proxy")
	spread, _, _ := unstructured.NestedSlice(proxy.Object, "spec", "template", "spec", "topologySpreadConstraints")
	podLabels, _, _ := unstructured.NestedStringMap(proxy.Object, "spec", "template", "metadata", "labels")
	if len(spread) != 1 {
		t.Fatalf("proxy topologySpreadConstraints %v, want one", spread)
	}
	c := spread[0].(map[string]any)
	match, _, _ := unstructured.NestedStringMap(c, "labelSelector", "matchLabels")
	if c["topologyKey"] != "kubernetes.io/hostname" || c["whenUnsatisfiable"] != "ScheduleAnyway" || len(match) == 0 {
		t.Errorf("proxy spread %v, want hostname, ScheduleAnyway, the proxy's labels", c)
	}
	for k, v := range match {
		if podLabels[k] != v {
			t.Errorf("the spread selects %s=%s, which the proxy pods do not carry (%v)", k, v, podLabels)
		}
	}
	for _, sm := range byKind(ha, "ServiceMonitor") {
		if sm.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s lacks monitoring.labels", ref(sm))
		}
	}
	for _, b := range byKind(ha, "ClusterRoleBinding") {
		if b.GetName() == "tailcut-metrics-scraper" {
			continue // the scraper's own ServiceAccount
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		if name := subjects[0].(map[string]any)["name"]; name != "tailcut-operator" {
			t.Errorf("%s binds %v, want the ServiceAccount tailcut-operator", ref(b), name)
		}
	}

	demo := render(t, valueSets[4])
	var args []string
	for _, d := range byKind(demo, "Deployment") {
		if d.GetName() == "tailcut" {
			args = containerArgs(t, d, "manager")
		}
	}
	if !slices.Contains(args, "--prometheus-url=http://prometheus-operated.monitoring:9090") || !slices.Contains(args, "--leader-elect") {
		t.Errorf("operator args lack the Prometheus URL or leader election: %v", args)
	}
	// The Helm test verifies the demo's policy through the release's proxy,
	// reads each workload replica's counters by its stable name and Envoy's
	// from the operator's Prometheus, and records its verdict.
	j := deployment(t, demo, "tailcut-verify")
	if j.GetAnnotations()["helm.sh/hook"] != "test" {
		t.Errorf("%s is not a Helm test hook", ref(j))
	}
	if j.GetKind() != "Pod" {
		t.Errorf("the Helm test is a %s: helm test --logs prints the logs of Pod hooks only", j.GetKind())
	}
	args = containerArgs(t, j, "verify")
	for _, want := range []string{"--policy=chart-demo/workload", "--record", "--url=http://tailcut-proxy.chart-demo.svc:80/",
		"--prometheus-url=http://prometheus-operated.monitoring:9090",
		"--workload-metrics=http://workload-0.workload-replicas.chart-demo.svc:8090/metrics,http://workload-1.workload-replicas.chart-demo.svc:8090/metrics,http://workload-2.workload-replicas.chart-demo.svc:8090/metrics"} {
		if !slices.Contains(args, want) {
			t.Errorf("the Helm test's args lack %s: %q", want, args)
		}
	}
	if sa, _, _ := unstructured.NestedString(j.Object, append(podSpecPath(j), "serviceAccountName")...); sa != "tailcut-verify" {
		t.Errorf("the Helm test runs as %q, want its own ServiceAccount tailcut-verify", sa)
	}
	for _, r := range byKind(demo, "Role") {
		if r.GetName() != "tailcut-verify" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(r.Object, "rules")
		if got := fmt.Sprint(rules); got != "[map[apiGroups:[tailcut.io] resources:[hedgepolicies] verbs:[get]] map[apiGroups:[] resources:[events] verbs:[create]]]" {
			t.Errorf("the Helm test's Role grants %s; want get on hedgepolicies and create on events only", got)
		}
	}
	// A user's own policy, in another namespace, without the demo.
	own := render(t, valueSet{name: "verify-own", set: []string{"verify.policy=shop/checkout", "verify.url=http://edge.shop:8080/cart"}})
	if !has(own, "Pod", "tailcut-verify") {
		t.Fatal("verify.policy renders no Helm test")
	}
	args = containerArgs(t, deployment(t, own, "tailcut-verify"), "verify")
	if !slices.Contains(args, "--policy=shop/checkout") || !slices.Contains(args, "--url=http://edge.shop:8080/cart") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--workload-metrics") }) {
		t.Errorf("the Helm test for shop/checkout: %q", args)
	}
	for _, kind := range []string{"Role", "RoleBinding"} {
		for _, r := range byKind(own, kind) {
			if r.GetName() == "tailcut-verify" && r.GetNamespace() != "shop" {
				t.Errorf("%s is in %s, want the policy's namespace shop", ref(r), r.GetNamespace())
			}
		}
	}
}

// EnvoyFilter rights and the --istio flag come with istio.enabled, and
// without it the operator gets no right on any Istio resource.
func TestIstioRightsOnlyWithIstioEnabled(t *testing.T) {
	for _, v := range []valueSet{valueSets[0], valueSets[6]} {
		on := v.name == "istio"
		objs := render(t, v)
		istioRules := 0
		for _, r := range byKind(objs, "ClusterRole") {
			rules, _, _ := unstructured.NestedSlice(r.Object, "rules")
			for _, rule := range rules {
				groups, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "apiGroups")
				resources, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "resources")
				if slices.Contains(groups, "networking.istio.io") {
					istioRules++
					if !on {
						t.Errorf("%s: %s grants %v on %v without istio.enabled", v.name, ref(r), groups, resources)
					}
				}
			}
		}
		if on && istioRules != 2 {
			t.Errorf("%s: %d rules on networking.istio.io, want envoyfilters and virtualservices", v.name, istioRules)
		}
		for _, d := range byKind(objs, "Deployment") {
			if d.GetName() != "tailcut" {
				continue
			}
			if got := slices.Contains(containerArgs(t, d, "manager"), "--istio"); got != on {
				t.Errorf("%s: operator has --istio = %v, want %v", v.name, got, on)
			}
		}
	}
}

// EnvoyPatchPolicy rights and the --envoy-gateway flag come with
// envoyGateway.enabled, exactly as config/rbac/envoygateway_role.yaml grants
// them, and without it the operator gets no right on Envoy Gateway's or the
// Gateway API's resources.
func TestEnvoyGatewayRightsOnlyWithEnvoyGatewayEnabled(t *testing.T) {
	generated := decodeObjects(t, mustRead(t, repo("config", "rbac", "envoygateway_role.yaml")))
	want, _ := generated[0].Object["rules"].([]any)
	gatewayGroups := []string{"gateway.envoyproxy.io", "gateway.networking.k8s.io"}
	for _, v := range []valueSet{valueSets[0], valueSets[len(valueSets)-1]} {
		on := v.name == "envoy-gateway"
		objs := render(t, v)
		found := false
		for _, r := range byKind(objs, "ClusterRole") {
			rules, _, _ := unstructured.NestedSlice(r.Object, "rules")
			if r.GetName() == "tailcut-envoy-gateway" {
				found = true
				if !equalJSON(t, rules, want) {
					t.Errorf("%s: ClusterRole %s rules differ from config/rbac/envoygateway_role.yaml:\n got %v\nwant %v", v.name, r.GetName(), rules, want)
				}
				continue
			}
			for _, rule := range rules {
				groups, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "apiGroups")
				if slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(gatewayGroups, g) }) {
					t.Errorf("%s: %s grants %v outside the Envoy Gateway role", v.name, ref(r), groups)
				}
			}
		}
		if found != on {
			t.Errorf("%s: ClusterRole tailcut-envoy-gateway rendered = %v, want %v", v.name, found, on)
		}
		for _, d := range byKind(objs, "Deployment") {
			if d.GetName() != "tailcut" {
				continue
			}
			if got := slices.Contains(containerArgs(t, d, "manager"), "--envoy-gateway"); got != on {
				t.Errorf("%s: operator has --envoy-gateway = %v, want %v", v.name, got, on)
			}
		}
	}
}

// The chart refuses values that cannot work, with a message that says why.
func TestHelmRejectsInvalidValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"demo.enabled=true", "proxy.enabled=false"}, "demo.enabled needs proxy.enabled"},
		{[]string{"operator.replicass=2"}, "additional properties 'replicass' not allowed"},
		{[]string{"monitoring.rules.policyNotReadyFor=soon"}, "policyNotReadyFor"},
		{[]string{"operator.prometheusURL=prometheus:9090"}, "prometheusURL"},
	} {
		args := []string{"template", "tailcut", repo("charts", "tailcut")}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := runCombined(tool(t, "helm"), args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("helm template --set %v: err=%v, want an error naming %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// The kustomize tree builds; config/prometheus builds on top of config/default
// (the commented line users uncomment).
func TestKustomizeBuild(t *testing.T) {
	objs := kustomizeDefault(t, true)
	for kind, want := range map[string]int{"Namespace": 1, "CustomResourceDefinition": 1, "Deployment": 1, "Service": 1,
		"ServiceAccount": 2, "ClusterRole": 4, "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1, "ServiceMonitor": 1, "Secret": 1} {
		if got := len(byKind(objs, kind)); got != want {
			t.Errorf("%d %s objects, want %d", got, kind, want)
		}
	}
	for _, o := range objs {
		if !strings.HasPrefix(o.GetName(), "tailcut-") && o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("%s lacks the tailcut- name prefix", ref(o))
		}
		if namespaced(o.GetKind()) && o.GetNamespace() != "tailcut-system" {
			t.Errorf("%s is not in tailcut-system", ref(o))
		}
	}
}

// kustomizeDefault builds config/default; withPrometheus also includes
// config/prometheus, in a copy of config/ with that line uncommented.
func kustomizeDefault(t *testing.T, withPrometheus bool) []*unstructured.Unstructured {
	t.Helper()
	dir := repo("config")
	if withPrometheus {
		dir = filepath.Join(t.TempDir(), "config")
		if err := os.CopyFS(dir, os.DirFS(repo("config"))); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "default", "kustomization.yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		uncommented := strings.Replace(string(b), "#- ../prometheus", "- ../prometheus", 1)
		if uncommented == string(b) {
			t.Fatalf("config/default/kustomization.yaml has no '#- ../prometheus' line to uncomment")
		}
		if err := os.WriteFile(path, []byte(uncommented), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return decodeObjects(t, execute(t, tool(t, "kustomize"), "build", filepath.Join(dir, "default")))
}

func containerArgs(t *testing.T, o *unstructured.Unstructured, name string) []string {
	t.Helper()
	c := container(t, o, name)
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

func containerEnv(t *testing.T, o *unstructured.Unstructured, name string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range container(t, o, name)["env"].([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			env[m["name"].(string)] = v
		}
	}
	return env
}

// container returns the named container (or init container) of a workload's
// pod template.
// podSpecPath is where o's pod spec sits: a Pod's own spec, a workload's
// template.
func podSpecPath(o *unstructured.Unstructured) []string {
	if o.GetKind() == "Pod" {
		return []string{"spec"}
	}
	return []string{"spec", "template", "spec"}
}

func container(t *testing.T, o *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	for _, field := range []string{"containers", "initContainers"} {
		list, _, _ := unstructured.NestedSlice(o.Object, append(podSpecPath(o), field)...)
		for _, c := range list {
			if m := c.(map[string]any); m["name"] == name {
				return m
			}
		}
	}
	t.Fatalf("%s has no container %q", ref(o), name)
	return nil
}

// The chart README's values table lists every value, and only real ones.
// Objects that are passed through to Kubernetes (resources, securityContext,
// ...) are one row each.
func TestChartReadmeListsEveryValue(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal(mustRead(t, repo("charts", "tailcut", "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	passThrough := []string{"resources", "podSecurityContext", "securityContext", "nodeSelector", "affinity",
		"podAnnotations", "podLabels", "annotations", "labels", "config", "policy"}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !slices.Contains(passThrough, k) {
				walk(p, sub)
				continue
			}
			keys = append(keys, p)
		}
	}
	walk("", values)
	readme := string(mustRead(t, repo("charts", "tailcut", "README.md")))
	_, table, ok := strings.Cut(readme, "\n## Values\n")
	if !ok {
		t.Fatal("README.md has no '## Values' section")
	}
	rows := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1)
	var listed []string
	for _, r := range rows {
		listed = append(listed, r[1])
	}
	for _, k := range keys {
		if !slices.Contains(listed, k) {
			t.Errorf("README.md's values table lacks %s", k)
		}
	}
	for _, k := range listed {
		if !slices.Contains(keys, k) {
			t.Errorf("README.md lists %s, which is not in values.yaml", k)
		}
	}
}

// The operator's NetworkPolicy opens its xDS port to the chart's proxies (and
// networkPolicy.xdsClients) only, and its metrics and probes to all.
func TestNetworkPolicyLimitsXDSToTheProxies(t *testing.T) {
	for _, tc := range []struct {
		v        valueSet
		xdsPeers int
	}{
		{valueSets[0], -1}, // off by default
		{valueSet{name: "np-on", set: []string{"networkPolicy.enabled=true"}}, 1},
		{valueSet{name: "np-extra", set: []string{"networkPolicy.enabled=true", "networkPolicy.xdsClients[0].namespaceSelector.matchLabels.team=edge"}}, 2},
	} {
		t.Run(tc.v.name, func(t *testing.T) {
			var np *unstructured.Unstructured
			for _, o := range render(t, tc.v) {
				if o.GetKind() == "NetworkPolicy" {
					np = o
				}
			}
			if tc.xdsPeers < 0 {
				if np != nil {
					t.Fatal("a NetworkPolicy rendered although networkPolicy.enabled is false")
				}
				return
			}
			if np == nil {
				t.Fatal("no NetworkPolicy")
			}
			sel, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
			if sel["app.kubernetes.io/component"] != "operator" {
				t.Errorf("the policy selects %v, want the operator", sel)
			}
			rules, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			if len(rules) != 2 {
				t.Fatalf("%d ingress rules, want 2 (xDS; metrics and probes)", len(rules))
			}
			xds := rules[0].(map[string]any)
			ports := xds["ports"].([]any)
			from, _ := xds["from"].([]any)
			if len(ports) != 1 || ports[0].(map[string]any)["port"] != "grpc-xds" || len(from) != tc.xdsPeers {
				t.Errorf("xDS rule %v: want port grpc-xds from %d peers", xds, tc.xdsPeers)
			}
			proxy := from[0].(map[string]any)["podSelector"].(map[string]any)["matchLabels"].(map[string]any)
			if proxy["app.kubernetes.io/component"] != "proxy" {
				t.Errorf("the xDS port's first peer is %v, want the chart's proxies", proxy)
			}
			open := rules[1].(map[string]any)
			if _, limited := open["from"]; limited || len(open["ports"].([]any)) != 2 {
				t.Errorf("metrics and probes rule %v: want both ports, from anywhere", open)
			}
		})
	}
}

// xDS is on mutual TLS by default (#23, defect 6): the chart issues a CA,
// the operator's certificate for the address the proxies dial, and the
// proxies' client certificate, and each side mounts its Secret. Secrets of
// the user's own replace them; one without the other is refused.
func TestXDSTLSWiring(t *testing.T) {
	want := map[string][]string{
		"manager":   {"--xds-tls-cert=/etc/tailcut/xds-tls/tls.crt", "--xds-tls-key=/etc/tailcut/xds-tls/tls.key", "--xds-tls-client-ca=/etc/tailcut/xds-tls/ca.crt"},
		"bootstrap": {"--xds-tls-cert=/etc/tailcut/xds-tls/tls.crt", "--xds-tls-key=/etc/tailcut/xds-tls/tls.key", "--xds-tls-ca=/etc/tailcut/xds-tls/ca.crt"},
	}
	wired := func(t *testing.T, objs []*unstructured.Unstructured, secrets map[string]string) {
		t.Helper()
		for deploy, container := range map[string]string{"tailcut": "manager", "tailcut-proxy": "bootstrap"} {
			d := deployment(t, objs, deploy)
			args := strings.Join(containerArgs(t, d, container), " ")
			for _, w := range want[container] {
				if !strings.Contains(args, w) {
					t.Errorf("%s/%s args lack %s: %s", deploy, container, w, args)
				}
			}
			vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
			found := false
			for _, v := range vols {
				if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == secrets[deploy] {
					found = true
				}
			}
			if !found {
				t.Errorf("%s mounts no Secret %s: %v", deploy, secrets[deploy], vols)
			}
		}
	}

	t.Run("default: the chart's own certificates", func(t *testing.T) {
		objs := render(t, valueSet{name: "default"})
		wired(t, objs, map[string]string{"tailcut": "tailcut-xds-server", "tailcut-proxy": "tailcut-xds-proxy"})
		data := map[string]map[string][]byte{}
		for _, o := range objs {
			if o.GetKind() != "Secret" {
				continue
			}
			fields, _, _ := unstructured.NestedStringMap(o.Object, "data")
			data[o.GetName()] = map[string][]byte{}
			for k, v := range fields {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("%s %s: %v", o.GetName(), k, err)
				}
				data[o.GetName()][k] = b
			}
		}
		server, proxy := data["tailcut-xds-server"], data["tailcut-xds-proxy"]
		if server == nil || proxy == nil {
			t.Fatalf("Secrets rendered: %v, want tailcut-xds-server and tailcut-xds-proxy", slices.Collect(maps.Keys(data)))
		}
		// The proxies dial the address in their bootstrap's --xds-address and
		// check the server's name against its host.
		var host string
		for _, a := range containerArgs(t, deployment(t, objs, "tailcut-proxy"), "bootstrap") {
			if v, ok := strings.CutPrefix(a, "--xds-address="); ok {
				host, _, _ = net.SplitHostPort(v)
			}
		}
		verify := func(who string, files map[string][]byte, roots []byte, usage x509.ExtKeyUsage, name string) {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(roots) {
				t.Fatalf("%s: the CA does not parse", who)
			}
			if _, err := tls.X509KeyPair(files["tls.crt"], files["tls.key"]); err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			block, _ := pem.Decode(files["tls.crt"])
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s's certificate: %v", who, err)
			}
		}
		// The operator checks the proxies' certificates with its ca.crt, the
		// proxies the operator's with theirs.
		verify("the operator", server, proxy["ca.crt"], x509.ExtKeyUsageServerAuth, host)
		verify("the proxies", proxy, server["ca.crt"], x509.ExtKeyUsageClientAuth, "")
	})

	t.Run("Secrets of the user's own", func(t *testing.T) {
		objs := render(t, valueSet{name: "xds-tls", set: []string{"xdsTLS.serverSecret=my-xds-server", "xdsTLS.proxySecret=my-xds-proxy", "operator.metricsTLS.secret=my-metrics-tls"}})
		wired(t, objs, map[string]string{"tailcut": "my-xds-server", "tailcut-proxy": "my-xds-proxy"})
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				t.Errorf("the chart rendered Secret %s beside the user's own", o.GetName())
			}
		}
	})

	t.Run("refused: one Secret without the other", func(t *testing.T) {
		helm := tool(t, "helm")
		out, err := runWith(helm, nil, "template", "tailcut", repo("charts", "tailcut"), "--set", "xdsTLS.serverSecret=my-xds-server")
		if err == nil || !strings.Contains(out, "xdsTLS.serverSecret and xdsTLS.proxySecret go together") {
			t.Errorf("one xDS Secret rendered (%v): %s", err, out)
		}
	})
}

// No container mounts a volume inside another volume it mounts read-only:
// the runtime cannot make the mount point there, and the container never
// starts (the proxies' xDS certificate, mounted in /etc/envoy, did that in
// the kind cluster: "mkdir .../rootfs/etc/envoy/xds-tls: read-only file
// system").
func TestNoMountInsideAReadOnlyMount(t *testing.T) {
	for _, v := range valueSets {
		for _, o := range render(t, v) {
			for _, field := range []string{"containers", "initContainers"} {
				list, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
				for _, c := range list {
					c := c.(map[string]any)
					mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
					for _, outer := range mounts {
						outer := outer.(map[string]any)
						if ro, _ := outer["readOnly"].(bool); !ro {
							continue
						}
						for _, inner := range mounts {
							inner := inner.(map[string]any)
							if inner["name"] != outer["name"] && strings.HasPrefix(fmt.Sprint(inner["mountPath"]), strings.TrimSuffix(fmt.Sprint(outer["mountPath"]), "/")+"/") {
								t.Errorf("%s: %s/%s mounts %s at %s, inside the read-only %s at %s",
									v.name, ref(o), c["name"], inner["name"], inner["mountPath"], outer["name"], outer["mountPath"])
							}
						}
					}
				}
			}
		}
	}
}

// Chart.yaml says where the chart comes from and which Kubernetes it needs,
// and Helm holds an install to that.
func TestChartMetadata(t *testing.T) {
	var meta struct {
		KubeVersion string   `json:"kubeVersion"`
		Home        string   `json:"home"`
		Sources     []string `json:"sources"`
	}
	if err := yaml.Unmarshal(mustRead(t, repo("charts", "tailcut", "Chart.yaml")), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.KubeVersion == "" || meta.Home == "" || len(meta.Sources) == 0 {
		t.Errorf("Chart.yaml kubeVersion %q, home %q, sources %v: want all three", meta.KubeVersion, meta.Home, meta.Sources)
	}
	helm := tool(t, "helm")
	out, err := runWith(helm, nil, "template", "tailcut", repo("charts", "tailcut"), "--kube-version", "1.28.0")
	if err == nil || !strings.Contains(out, "kubeVersion") {
		t.Errorf("rendered for Kubernetes 1.28 (%v): %.300s", err, out)
	}
	if out, err := runWith(helm, nil, "template", "tailcut", repo("charts", "tailcut")); err != nil {
		t.Errorf("helm template without --kube-version: %v: %.300s", err, out)
	}
}
