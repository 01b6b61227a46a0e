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

// Package celvalidation checks the HedgePolicy schema and its CEL rules against a
// real kube-apiserver: each case mutates a valid policy and names the exact
// rejection the user would see from kubectl apply.
package celvalidation

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tailcut/tailcut/test/envtestutil"
)

var (
	k8s     client.Client
	testEnv *envtest.Environment
)

func TestMain(m *testing.M) {
	env, cfg, err := envtestutil.Start()
	testEnv = env
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	code := 1
	if err == nil {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

func basePolicy(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tailcut.io/v1alpha1",
		"kind":       "HedgePolicy",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"targetRef": map[string]any{"name": "checkout", "port": int64(8080)},
		},
	}}
}

func set(path string, value any) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, strings.Split("spec."+path, ".")...); err != nil {
			panic(err)
		}
	}
}

func TestHedgePolicyValidation(t *testing.T) {
	cases := []struct {
		desc       string
		mutate     []func(*unstructured.Unstructured)
		wantErrors []string
		notWant    []string // in no rejection: messages a person would misread
	}{
		{desc: "minimal policy is valid"},
		{desc: "static delay", mutate: fns(set("delay", map[string]any{"mode": "Static", "static": "20ms"}))},
		{desc: "fan-out of two copies", mutate: fns(set("delay", map[string]any{"mode": "FanOut"}), set("maxHedges", int64(2)), set("budget.maxExtraLoadPercent", int64(200)))},
		{desc: "POST with allowNonIdempotent", mutate: fns(set("match.methods", []any{"GET", "POST"}), set("allowNonIdempotent", true))},
		{desc: "custom query", mutate: fns(set("delay", map[string]any{"mode": "Auto", "auto": map[string]any{
			"source": "Custom", "query": `histogram_quantile({{.Quantile}}, rate(x_bucket{namespace="{{.Namespace}}"}[{{.Window}}]))`, "min": "2ms", "max": "2ms"}}))},
		{desc: "workload source with labels", mutate: fns(set("delay.auto", map[string]any{
			"source": "Workload", "workload": map[string]any{"metric": "app_latency_seconds", "labels": map[string]any{"job": "checkout"}}}))},
		{desc: "fallback static", mutate: fns(set("delay.auto.fallback", map[string]any{"action": "Static", "delay": "40ms"}))},

		{desc: "POST without allowNonIdempotent", mutate: fns(set("match.methods", []any{"GET", "POST"})),
			wantErrors: []string{"spec.match.methods: Invalid value", "methods other than GET, HEAD and OPTIONS are not idempotent: set allowNonIdempotent: true to hedge them"}},
		{desc: "DELETE without allowNonIdempotent", mutate: fns(set("match.methods", []any{"DELETE"})),
			wantErrors: []string{"methods other than GET, HEAD and OPTIONS are not idempotent"}},
		{desc: "unknown method", mutate: fns(set("match.methods", []any{"FETCH"})),
			wantErrors: []string{`spec.match.methods[0]: Unsupported value: "FETCH"`}},
		{desc: "duplicate method", mutate: fns(set("match.methods", []any{"GET", "GET"})),
			wantErrors: []string{`spec.match.methods[1]: Duplicate value: "GET"`}},
		{desc: "path prefix without slash", mutate: fns(set("match.pathPrefix", "api")),
			wantErrors: []string{"spec.match.pathPrefix: Invalid value: \"api\": spec.match.pathPrefix in body should match"}},
		{desc: "Istio with a path prefix", mutate: fns(set("match.pathPrefix", "/api"), set("publish", map[string]any{"target": "Istio"})),
			wantErrors: []string{"spec.match.pathPrefix: Invalid value", "publish.target Istio hedges every path of the Service (the EnvoyFilter patches the Service's one route): leave match.pathPrefix unset or /"}},
		{desc: "Istio with the whole path", mutate: fns(set("match.pathPrefix", "/"), set("publish", map[string]any{"target": "Istio"}))},
		{desc: "EnvoyGateway", mutate: fns(set("publish", map[string]any{"target": "EnvoyGateway"}))},
		{desc: "EnvoyGateway with a path prefix", mutate: fns(set("match.pathPrefix", "/api"), set("publish", map[string]any{"target": "EnvoyGateway"})),
			wantErrors: []string{"spec.match.pathPrefix: Invalid value", "publish.target EnvoyGateway hedges the HTTPRoute rules that send to the Service, on every path they match: leave match.pathPrefix unset or /, and give the paths to hedge their own HTTPRoute rule"}},
		{desc: "EnvoyGateway with an affinity", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"header": "x-cache-key"}}), set("publish", map[string]any{"target": "EnvoyGateway"})),
			wantErrors: []string{"spec.affinity: Invalid value", "publish.target EnvoyGateway does not take affinity yet"}},
		{desc: "EnvoyGateway fan-out", mutate: fns(set("publish", map[string]any{"target": "EnvoyGateway"}), set("delay", map[string]any{"mode": "FanOut"}), set("budget", map[string]any{"maxExtraLoadPercent": int64(200)}))},
		{desc: "unknown publish target", mutate: fns(set("publish", map[string]any{"target": "Gateway"})),
			wantErrors: []string{`spec.publish.target: Unsupported value: "Gateway"`}},
		{desc: "static mode without static", mutate: fns(set("delay", map[string]any{"mode": "Static"})),
			wantErrors: []string{"spec.delay.static: Invalid value", "static is required when mode is Static"}},
		{desc: "static mode with auto", mutate: fns(set("delay", map[string]any{"mode": "Static", "static": "20ms", "auto": map[string]any{"quantile": 0.9}})),
			wantErrors: []string{"spec.delay.auto: Invalid value", "auto must not be set when mode is Static"}},
		{desc: "auto mode with static", mutate: fns(set("delay", map[string]any{"mode": "Auto", "static": "20ms"})),
			wantErrors: []string{"static must not be set when mode is Auto"}},
		{desc: "static delay too long", mutate: fns(set("delay", map[string]any{"mode": "Static", "static": "11s"})),
			wantErrors: []string{"spec.delay.static: Invalid value", "static must be between 1ms and 10s"}},
		{desc: "static delay zero", mutate: fns(set("delay", map[string]any{"mode": "Static", "static": "0ms"})),
			wantErrors: []string{"static must be between 1ms and 10s"}},
		{desc: "static delay not a duration", mutate: fns(set("delay", map[string]any{"mode": "Static", "static": "fast"})),
			wantErrors: []string{`spec.delay.static: Invalid value: "fast": spec.delay.static in body should match`}},
		{desc: "min greater than max", mutate: fns(set("delay.auto", map[string]any{"min": "200ms", "max": "100ms"})),
			wantErrors: []string{"spec.delay.auto.min: Invalid value", "min must not be greater than max"}},
		{desc: "quantile at 0.5", mutate: fns(set("delay.auto.quantile", 0.5)),
			wantErrors: []string{"spec.delay.auto.quantile: Invalid value", "quantile must be greater than 0.5 and at most 0.999"}},
		{desc: "quantile above 0.999", mutate: fns(set("delay.auto.quantile", 0.9999)),
			wantErrors: []string{"quantile must be greater than 0.5 and at most 0.999"}},
		// The OpenAPI maximum printed this as "should be less than or equal to 0".
		{desc: "quantile 1.0", mutate: fns(set("delay.auto.quantile", 1.0)),
			wantErrors: []string{"spec.delay.auto.quantile: Invalid value", "quantile must be greater than 0.5 and at most 0.999 (0.999 is p99.9"},
			notWant:    []string{"less than or equal to 0"}},
		{desc: "quantile 1 as an integer", mutate: fns(set("delay.auto.quantile", int64(1))),
			wantErrors: []string{"quantile must be greater than 0.5 and at most 0.999"}},
		{desc: "minSamples 0", mutate: fns(set("delay.auto.minSamples", int64(0))),
			wantErrors: []string{"spec.delay.auto.minSamples: Invalid value", "minSamples must be between 1 and 1000000"}},
		{desc: "deadbandPercent 101", mutate: fns(set("delay.auto.deadbandPercent", int64(101))),
			wantErrors: []string{"deadbandPercent must be between 0 and 100"}},
		{desc: "maxStepPercent 0", mutate: fns(set("delay.auto.maxStepPercent", int64(0))),
			wantErrors: []string{"maxStepPercent must be between 1 and 1000"}},
		{desc: "minRetryConcurrency 0", mutate: fns(set("budget.minRetryConcurrency", int64(0))),
			wantErrors: []string{"spec.budget.minRetryConcurrency: Invalid value", "minRetryConcurrency must be between 1 and 1000"}},
		{desc: "window too short", mutate: fns(set("delay.auto.window", "5s")),
			wantErrors: []string{"window must be between 15s and 1h"}},
		{desc: "custom source without query", mutate: fns(set("delay.auto.source", "Custom")),
			wantErrors: []string{"spec.delay.auto.query: Invalid value", "query is required when source is Custom and not allowed otherwise"}},
		{desc: "query without custom source", mutate: fns(set("delay.auto.query", "up")),
			wantErrors: []string{"query is required when source is Custom and not allowed otherwise"}},
		{desc: "workload block with Envoy source", mutate: fns(set("delay.auto.workload", map[string]any{"metric": "x"})),
			wantErrors: []string{"workload is only allowed when source is Workload"}},
		{desc: "workload label with a bad name", mutate: fns(set("delay.auto", map[string]any{
			"source": "Workload", "workload": map[string]any{"labels": map[string]any{"bad-name": "x"}}})),
			wantErrors: []string{"label names must be Prometheus label names"}},
		{desc: "fallback static without delay", mutate: fns(set("delay.auto.fallback", map[string]any{"action": "Static"})),
			wantErrors: []string{"spec.delay.auto.fallback.delay: Invalid value", "delay is required when action is Static and not allowed when action is Disable"}},
		{desc: "fallback disable with delay", mutate: fns(set("delay.auto.fallback", map[string]any{"action": "Disable", "delay": "10ms"})),
			wantErrors: []string{"delay is required when action is Static and not allowed when action is Disable"}},
		{desc: "staleAfter shorter than evaluationInterval", mutate: fns(set("delay.auto.staleAfter", "10s"), set("evaluationInterval", "1m")),
			wantErrors: []string{"spec.delay.auto.staleAfter: Invalid value", "staleAfter must not be shorter than evaluationInterval"}},
		{desc: "evaluationInterval too short", mutate: fns(set("evaluationInterval", "1s")),
			wantErrors: []string{"evaluationInterval must be between 5s and 1h"}},
		{desc: "affinity on a header", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"header": "x-cache-key"}}))},
		{desc: "affinity on the path with maglev", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "loadBalancer": "Maglev", "tableSize": int64(131071)}))},
		{desc: "affinity on a cookie with a larger ring", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"cookie": "session"}, "ringSize": int64(4096)}))},
		{desc: "affinity without a key", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{}})),
			wantErrors: []string{"spec.affinity.hashOn: Invalid value", "set exactly one of header, cookie, queryParameter and path: true"}},
		{desc: "affinity with two keys", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"header": "x-key", "queryParameter": "key"}})),
			wantErrors: []string{"set exactly one of header, cookie, queryParameter and path: true"}},
		{desc: "affinity on path: false", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": false}})),
			wantErrors: []string{"set exactly one of header, cookie, queryParameter and path: true"}},
		{desc: "affinity header with a space", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"header": "x key"}})),
			wantErrors: []string{"spec.affinity.hashOn.header: Invalid value"}},
		{desc: "affinity with an unknown balancer", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "loadBalancer": "Random"})),
			wantErrors: []string{`spec.affinity.loadBalancer: Unsupported value: "Random"`}},
		{desc: "maglev table not prime", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "loadBalancer": "Maglev", "tableSize": int64(65536)})),
			wantErrors: []string{"spec.affinity.tableSize: Unsupported value: 65536"}},
		{desc: "ring hash with a table size", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "tableSize": int64(65537)})),
			wantErrors: []string{"spec.affinity.tableSize: Invalid value", "tableSize is for loadBalancer Maglev; RingHash takes ringSize"}},
		{desc: "maglev with a ring size", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "loadBalancer": "Maglev", "ringSize": int64(1024)})),
			wantErrors: []string{"spec.affinity.ringSize: Invalid value", "ringSize is for loadBalancer RingHash; Maglev takes tableSize"}},
		{desc: "ring too small", mutate: fns(set("affinity", map[string]any{"hashOn": map[string]any{"path": true}, "ringSize": int64(8)})),
			wantErrors: []string{"ringSize must be between 64 and 8388608 entries"}},
		{desc: "maxHedges 4", mutate: fns(set("maxHedges", int64(4))),
			wantErrors: []string{"spec.maxHedges: Invalid value", "maxHedges must be 1, 2 or 3"}},
		{desc: "maxHedges 0", mutate: fns(set("maxHedges", int64(0))),
			wantErrors: []string{"maxHedges must be 1, 2 or 3"}},
		{desc: "budget 0 percent", mutate: fns(set("budget.maxExtraLoadPercent", int64(0))),
			wantErrors: []string{"spec.budget.maxExtraLoadPercent: Invalid value", "maxExtraLoadPercent must be between 1 and 200 (percent of the requests; above 50 only with delay.mode FanOut)"}},
		{desc: "budget 51 percent with a delayed hedge", mutate: fns(set("budget.maxExtraLoadPercent", int64(51))),
			wantErrors: []string{"spec.budget.maxExtraLoadPercent: Invalid value", "maxExtraLoadPercent above 50 is for delay.mode FanOut only"}},
		{desc: "budget 201 percent", mutate: fns(set("delay", map[string]any{"mode": "FanOut"}), set("budget.maxExtraLoadPercent", int64(201))),
			wantErrors: []string{"maxExtraLoadPercent must be between 1 and 200"}},
		{desc: "fan-out with the default budget", mutate: fns(set("delay", map[string]any{"mode": "FanOut"})),
			wantErrors: []string{"spec.budget.maxExtraLoadPercent: Invalid value", "delay.mode FanOut sends copies of every request at once and costs what it copies: set budget.maxExtraLoadPercent to 100 (one copy of each request, twice the backends' load) up to 200 (maxHedges 2, three times the load)"}},
		{desc: "fan-out with a static delay", mutate: fns(set("delay", map[string]any{"mode": "FanOut", "static": "20ms"}), set("budget.maxExtraLoadPercent", int64(100))),
			wantErrors: []string{"spec.delay.mode: Invalid value", "delay.mode FanOut takes neither static nor auto: its copies leave 1ms apart"}},
		{desc: "fan-out of OPTIONS", mutate: fns(set("delay", map[string]any{"mode": "FanOut"}), set("budget.maxExtraLoadPercent", int64(100)), set("match.methods", []any{"GET", "OPTIONS"})),
			wantErrors: []string{"spec.match.methods: Invalid value", "delay.mode FanOut copies every request it matches: only GET and HEAD may be fanned out (leave allowNonIdempotent unset)"}},
		{desc: "fan-out with allowNonIdempotent", mutate: fns(set("delay", map[string]any{"mode": "FanOut"}), set("budget.maxExtraLoadPercent", int64(100)), set("allowNonIdempotent", true)),
			wantErrors: []string{"only GET and HEAD may be fanned out"}},
		{desc: "empty retryOn", mutate: fns(set("retryOn", []any{})),
			wantErrors: []string{"spec.retryOn: Invalid value: 0: spec.retryOn in body should have at least 1 items"}},
		{desc: "unknown retryOn", mutate: fns(set("retryOn", []any{"sometimes"})),
			wantErrors: []string{`spec.retryOn[0]: Unsupported value: "sometimes"`}},
		{desc: "target kind Deployment", mutate: fns(set("targetRef.kind", "Deployment")),
			wantErrors: []string{`spec.targetRef.kind: Unsupported value: "Deployment"`}},
		{desc: "target name not a DNS label", mutate: fns(set("targetRef.name", "Check_Out")),
			wantErrors: []string{`spec.targetRef.name: Invalid value: "Check_Out"`}},
		{desc: "target port 0", mutate: fns(set("targetRef.port", int64(0))),
			wantErrors: []string{"spec.targetRef.port: Invalid value", "port must be between 1 and 65535"}},
		{desc: "target port 65536", mutate: fns(set("targetRef.port", int64(65536))),
			wantErrors: []string{"port must be between 1 and 65535"}},
		{desc: "publish target unknown", mutate: fns(set("publish.target", "Linkerd")),
			wantErrors: []string{`spec.publish.target: Unsupported value: "Linkerd"`}},
		{desc: "query too long", mutate: fns(set("delay.auto", map[string]any{"source": "Custom", "query": strings.Repeat("x", 4097)})),
			wantErrors: []string{"spec.delay.auto.query: Too long"}},
	}
	for i, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := context.Background()
			obj := basePolicy(fmt.Sprintf("case-%d", i))
			for _, m := range tc.mutate {
				m(obj)
			}
			err := k8s.Create(ctx, obj)
			if len(tc.wantErrors) == 0 {
				if err != nil {
					t.Fatalf("valid policy rejected: %v", err)
				}
				if err := k8s.Delete(ctx, obj); err != nil {
					t.Fatalf("deleting: %v", err)
				}
				return
			}
			if err == nil {
				_ = k8s.Delete(ctx, obj)
				t.Fatalf("invalid policy accepted; want errors %q", tc.wantErrors)
			}
			for _, want := range tc.wantErrors {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
			// Every bound has a message of its own; the schema's generic
			// "should be less/greater than" printed floats as integers.
			for _, bad := range append(tc.notWant, "in body should be less than", "in body should be greater than") {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("error contains %q:\n%v", bad, err)
				}
			}
		})
	}
}

// TestDefaults checks what the API server fills in for a minimal policy.
func TestDefaults(t *testing.T) {
	ctx := context.Background()
	obj := basePolicy("defaults")
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	want := map[string]any{
		"delay.mode":                 "Auto",
		"match.pathPrefix":           "/",
		"maxHedges":                  int64(1),
		"budget.maxExtraLoadPercent": int64(5),
		"evaluationInterval":         "30s",
		"publish.target":             "XDS",
		"targetRef.kind":             "Service",
	}
	for path, v := range want {
		got, found, err := unstructured.NestedFieldNoCopy(obj.Object, strings.Split("spec."+path, ".")...)
		if err != nil || !found || got != v {
			t.Errorf("spec.%s = %v (found %v, err %v), want %v", path, got, found, err, v)
		}
	}
	methods, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "match", "methods")
	retryOn, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "retryOn")
	if strings.Join(methods, ",") != "GET,HEAD" || strings.Join(retryOn, ",") != "reset,connect-failure" {
		t.Errorf("methods %v retryOn %v, want GET,HEAD and reset,connect-failure", methods, retryOn)
	}
}

func fns(f ...func(*unstructured.Unstructured)) []func(*unstructured.Unstructured) { return f }
