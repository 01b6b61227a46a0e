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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tailcut/tailcut/test/dashboards"
)

var promQL = parser.NewParser(parser.Options{})

// Sample values for Grafana's variables: the dashboards' own and the built-in
// ones. A variable without a sample fails the test, so a new variable gets one.
var grafanaSamples = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "30s",
	"__range":         "1h",
	"datasource":      "prometheus",
	"policy":          "demo/workload",
	"cluster":         "tailcut_demo_workload_80",
	"mesh_routes":     "envoy_vhost_workload_demo_svc_cluster_local_80_route_",
}

// Every dashboard is valid JSON with a unique uid, each panel queries the
// dashboard's data source variable, and every query (panel targets and
// label_values variables) parses as PromQL once the variables are substituted.
func TestDashboardQueriesParse(t *testing.T) {
	ds, err := dashboards.Load(repo("charts", "tailcut", "dashboards"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) < 3 {
		t.Fatalf("found %d dashboards, want at least 3", len(ds))
	}
	uids := map[string]string{}
	queries := 0
	for _, d := range ds {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: uid and title are required", d.File)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s and %s share uid %q", d.File, other, d.UID)
		}
		uids[d.UID] = d.File
		defined := d.VariableNames()
		if !slices.Contains(defined, "datasource") {
			t.Errorf("%s: no datasource variable", d.File)
		}
		qs, err := d.Queries()
		if err != nil {
			t.Error(err)
			continue
		}
		panelsWithQueries := map[*dashboards.Panel]bool{}
		for _, q := range qs {
			queries++
			if p := q.Panel; p != nil {
				panelsWithQueries[p] = true
				if p.Datasource["uid"] != "${datasource}" {
					t.Errorf("%s: panel %q does not use the datasource variable: %v", d.File, p.Title, p.Datasource)
				}
			}
			expr, problems := dashboards.Substitute(q.Expr, defined, grafanaSamples)
			for _, p := range problems {
				t.Errorf("%s: %s: %s", d.File, q.Where, p)
			}
			if _, err := promQL.ParseExpr(expr); err != nil {
				t.Errorf("%s: %s: %v\n  query: %s", d.File, q.Where, err, expr)
			}
		}
		var walk func([]dashboards.Panel)
		walk = func(ps []dashboards.Panel) {
			for i := range ps {
				walk(ps[i].Panels)
				if ps[i].Type != "row" && len(ps[i].Targets) == 0 {
					t.Errorf("%s: panel %q has no query", d.File, ps[i].Title)
				}
				for _, tg := range ps[i].Targets {
					if tg.Datasource["uid"] != "${datasource}" {
						t.Errorf("%s: panel %q query %s does not use the datasource variable", d.File, ps[i].Title, tg.RefID)
					}
				}
			}
		}
		walk(d.Panels)
	}
	if queries < 20 {
		t.Errorf("parsed only %d queries", queries)
	}
}

// The chart ships every dashboard file as a ConfigMap labelled for the Grafana
// sidecar, byte for byte.
func TestDashboardConfigMaps(t *testing.T) {
	files, _ := filepath.Glob(repo("charts", "tailcut", "dashboards", "*.json"))
	found := map[string]bool{}
	for _, cm := range byKind(render(t, valueSets[0]), "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("%s lacks the label grafana_dashboard: \"1\"", ref(cm))
		}
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		for key, content := range data {
			want, err := os.ReadFile(repo("charts", "tailcut", "dashboards", key))
			if err != nil {
				t.Errorf("%s has %s, which is not a dashboard file", ref(cm), key)
				continue
			}
			if strings.TrimRight(string(want), "\n") != content {
				t.Errorf("%s: %s differs from the file", ref(cm), key)
			}
			found[key] = true
		}
	}
	for _, f := range files {
		if !found[filepath.Base(f)] {
			t.Errorf("no ConfigMap carries %s", filepath.Base(f))
		}
	}
}

// Every alert of the PrometheusRule parses as PromQL, the four alerts the
// product promises are there, and promtool accepts the rule file.
func TestPrometheusRuleAlerts(t *testing.T) {
	for _, v := range valueSets {
		rules := byKind(render(t, v), "PrometheusRule")
		if len(rules) == 0 {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
			var alerts []string
			for _, g := range groups {
				for _, r := range g.(map[string]any)["rules"].([]any) {
					rule := r.(map[string]any)
					alert, _ := rule["alert"].(string)
					alerts = append(alerts, alert)
					expr, _ := rule["expr"].(string)
					if _, err := promQL.ParseExpr(expr); err != nil {
						t.Errorf("alert %s: %v\n  expr: %s", alert, err, expr)
					}
					if !strings.Contains(expr, `namespace="`+v.namespace()+`"`) {
						t.Errorf("alert %s is not scoped to the release's namespace: %s", alert, expr)
					}
				}
			}
			want := []string{"TailcutOperatorDown", "TailcutXDSConfigRejected", "TailcutDelayDerivationFailing", "TailcutHedgeRateAboveBudget", "TailcutPolicyNotReady", "TailcutEndpointWeightedDown"}
			if !slices.Contains(v.set, "proxy.enabled=false") {
				want = append(want, "TailcutProxiesNotProgrammed")
			}
			if !reflect.DeepEqual(alerts, want) {
				t.Errorf("alerts %v, want %v", alerts, want)
			}

			// promtool also checks the annotation templates and durations.
			b, err := yaml.Marshal(map[string]any{"groups": groups})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out := execute(t, tool(t, "promtool"), "check", "rules", path)
			if !strings.Contains(string(out), "SUCCESS") {
				t.Errorf("promtool check rules:\n%s", out)
			}
		})
	}
}

// The per-policy alerts, run by promtool over series as the operator exports
// them for two policies in one namespace: each policy's hedge rate is held
// against its own budget, the alerts name the policy's namespace and name,
// not the operator's namespace that the scrape adds, and an endpoint weighted
// down is alerted once it has stayed so for endpointWeightedDownFor, with
// its address and weight.
func TestPerPolicyAlertsUseEachPolicysBudget(t *testing.T) {
	rules := byKind(render(t, valueSets[1]), "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("the monitoring value set renders %d PrometheusRules", len(rules))
	}
	groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The operator's ServiceMonitor adds namespace and service (the
	// release's); a over its 5% budget is not alerted at 3%, b is over its 1%.
	op := `namespace="` + valueSets[1].namespace() + `",service="tailcut",`
	series := func(metric, policy, value string) map[string]any {
		return map[string]any{"series": metric + `{` + op + `policy="shop/` + policy + `",policy_namespace="shop",policy_name="` + policy + `"}`, "values": value}
	}
	exprOf := func(alert string) string {
		for _, g := range groups {
			for _, r := range g.(map[string]any)["rules"].([]any) {
				if rule := r.(map[string]any); rule["alert"] == alert {
					return rule["expr"].(string)
				}
			}
		}
		t.Fatalf("no alert %s", alert)
		return ""
	}
	tests := map[string]any{
		"rule_files": []string{"rules.yaml"},
		"tests": []any{map[string]any{
			"interval": "1m",
			"input_series": []any{
				series("tailcut_hedge_rate", "a", "0.03x20"),
				series("tailcut_policy_budget_ratio", "a", "0.05x20"),
				series("tailcut_hedge_rate", "b", "0.03x20"),
				series("tailcut_policy_budget_ratio", "b", "0.01x20"),
				series("tailcut_policy_ready", "a", "1x20"),
				series("tailcut_policy_ready", "b", "0x20"),
				// a's endpoint weighted down for 20 minutes, then 40.
				map[string]any{"series": `tailcut_endpoint_weight{` + op + `policy="shop/a",policy_namespace="shop",policy_name="a",endpoint="10.0.0.3:8080"}`, "values": "5x60"},
			},
			"alert_rule_test": []any{
				map[string]any{"alertname": "TailcutEndpointWeightedDown", "eval_time": "20m"},
				map[string]any{"alertname": "TailcutEndpointWeightedDown", "eval_time": "40m", "exp_alerts": []any{map[string]any{
					"exp_labels": map[string]any{"severity": "warning", "policy_namespace": "shop", "policy_name": "a", "endpoint": "10.0.0.3:8080"},
					"exp_annotations": map[string]any{
						"summary":     "An endpoint of shop/a answers far slower than the others.",
						"description": "tailcut has kept 10.0.0.3:8080 weighted down to 5 of 100 on the hedged route of shop/a for 30m, because its mean latency is twice the median endpoint's or more; hedging covers what it still answers, but the replica is still slow. status.slowEndpoints and the EndpointsBalanced condition give its mean and the median.",
					},
				}}},
			},
			"promql_expr_test": []any{
				map[string]any{"expr": exprOf("TailcutHedgeRateAboveBudget"), "eval_time": "15m",
					"exp_samples": []any{map[string]any{"labels": `{policy_namespace="shop",policy_name="b"}`, "value": 0.03}}},
				map[string]any{"expr": exprOf("TailcutPolicyNotReady"), "eval_time": "15m",
					"exp_samples": []any{map[string]any{"labels": `{policy_namespace="shop",policy_name="b"}`, "value": 0}}},
			},
		}},
	}
	tb, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), tb, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool(t, "promtool"), "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool test rules: %v\n%s\ntests:\n%s", err, out, tb)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
