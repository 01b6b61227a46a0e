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
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/dashboards"
	"github.com/tailcut/tailcut/test/envtestutil"
)

// meshRoutes is how the names of the route stats of the Service's virtual
// host (backend.demo.svc.cluster.local:8080) begin in a sidecar, spelled out
// by hand; the operator exports it as tailcut_policy_info's mesh_routes
// (controllers' TestMeshPolicyInfoNamesItsRouteStats).
const meshRoutes = "envoy_vhost_backend_demo_svc_cluster_local_8080_route_"

// operatorSeries serves, at Envoy's stats path, the series the operator
// exports for the mesh policy demo/backend that the dashboards' variables
// read. The operator does not run in this test: istiod and Envoy do.
func operatorSeries(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "tailcut_policy_info{policy=\"demo/backend\",policy_namespace=\"demo\",policy_name=\"backend\",data_plane=\"Istio\",cluster=\"\",mesh_routes=%q,source=\"Static\"} 1\n", meshRoutes)
		fmt.Fprintln(w, `tailcut_policy_budget_ratio{policy="demo/backend",policy_namespace="demo",policy_name="backend"} 0.05`)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// checkMeshDashboards sends hedged GETs and bypass GETs through the sidecar
// at listenPort for 30 s, while prom (a real Prometheus scraping the sidecar
// and operatorSeries) records them, and then runs every dashboard query that
// reads a mesh's sidecars, with the variables as Grafana resolves them from
// tailcut_policy_info. Each must return data, and the tail panel must show
// what the replicas saw: the GETs that meet the replica 200 ms slow make the
// bypass p99 near 200 ms and the hedged one near the 20 ms delay, and the
// extra load is the hedges the replicas counted per hedged GET.
func checkMeshDashboards(t *testing.T, prom string, listenPort int, host string, port int, slow, fast *replica) {
	t.Helper()
	c, err := promapi.NewClient(promapi.Config{Address: prom})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow.reset()
	fast.reset()
	var wg sync.WaitGroup
	var sent, bypassed int
	wg.Go(func() {
		for ctx.Err() == nil {
			sendTo(listenPort, host, port, http.MethodGet, 1, 1)
			sent++
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Go(func() {
		cl := &http.Client{Timeout: 5 * time.Second}
		for i := 0; ctx.Err() == nil; i++ {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item/%d", listenPort, i), nil)
			req.Host = fmt.Sprintf("%s:%d", host, port)
			req.Header.Set(plan.BypassHeader, "1")
			if resp, err := cl.Do(req); err == nil {
				resp.Body.Close()
				bypassed++
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// Envoy flushes histograms to its stats every 5 s: 25 s of traffic give
	// the 20 s rate window several scrapes with data.
	time.Sleep(25 * time.Second)

	// The dashboards' mesh_routes variable: label_values(tailcut_policy_info{policy="$policy"}, mesh_routes).
	got, _, err := api.LabelValues(context.Background(), "mesh_routes", []string{`tailcut_policy_info{policy="demo/backend"}`}, time.Now().Add(-time.Minute), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[0]) != meshRoutes {
		t.Fatalf("mesh_routes of demo/backend: %v, want [%s]", got, meshRoutes)
	}
	values := map[string]string{
		"__rate_interval": "20s", "__interval": "5s", "__range": "1m", "datasource": "prometheus",
		"policy": "demo/backend", "cluster": "", // a mesh policy has no cluster of tailcut's proxy
		"mesh_routes": string(got[0]),
	}
	dir := filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards")
	readsMesh := func(q dashboards.Query) bool { return strings.Contains(q.Expr, "mesh_routes") }
	ran, failures, err := dashboards.CheckQueriesWhere(context.Background(), api, dir, values, readsMesh)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if ran < 8 {
		t.Errorf("ran %d dashboard queries that read the mesh, want every data-plane panel's (8)", ran)
	}
	panel := func(file, title, ref string) float64 {
		v, expr, err := dashboards.PanelValue(context.Background(), api, dir, file, title, ref, values)
		if err != nil {
			t.Fatalf("%v\n  query: %s", err, expr)
		}
		return v
	}
	const tail = "p50 and p99: bypass vs hedged"
	bypassP99, hedgedP99 := panel("tailcut-tail.json", tail, "B"), panel("tailcut-tail.json", tail, "D")
	extra := panel("tailcut-tail.json", "Extra load at the backends", "A")
	cancel()
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // cancelled attempts end
	sa, _ := slow.counts()
	fa, _ := fast.counts()
	firsts, hedges := sa["GET/1"]+fa["GET/1"]-bypassed, sa["GET/2"]+fa["GET/2"]
	counted := float64(hedges) / float64(max(firsts, 1))
	t.Logf("mesh dashboards: %d queries answered; %d hedged GETs and %d bypass GETs sent; tail panel: bypass p99 %.0f ms, hedged p99 %.0f ms; extra load %.3f (the replicas counted %d hedges for %d hedged GETs: %.3f)",
		ran, sent, bypassed, bypassP99, hedgedP99, extra, hedges, firsts, counted)
	// Envoy's buckets around 200 ms are (100, 250], and a hedged request
	// answered at the delay plus a fast answer (25 ms) falls in (10, 25] or
	// (25, 50], where histogram_quantile puts the p99 near 50 (49 and 50 ms
	// in two runs): the bucket edge is no bound. Under 100 ms (the next edge,
	// half the slow replica's 200 ms) says the slow replica's answers are
	// not in the hedged p99.
	if bypassP99 < 100 || hedgedP99 >= 100 {
		t.Errorf("tail panel: bypass p99 %.0f ms, hedged p99 %.0f ms; want the slow replica's 200 ms on the bypass (over 100) and the 20 ms delay's answer on the hedged route (under 100)", bypassP99, hedgedP99)
	}
	// The panel reads the last 20 s of a steady run, the replicas the whole
	// run: with about 600 GETs the two differ by a few hundredths (a binomial
	// share's standard deviation is under 0.02).
	if math.Abs(extra-counted) > 0.08 {
		t.Errorf("extra load panel: %.3f hedges per request; the replicas counted %.3f", extra, counted)
	}
}
