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

package xds

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

// TestHostileClientsCannotChangeHedging is #14's "hostile clients": a client
// that sends Envoy's retry and timeout headers, with or without a spoofed
// X-Forwarded-For or x-envoy-internal, gets the attempts its policy allows
// (1 + maxHedges on the hedged route, 1 elsewhere) and none of the headers
// reaches the upstream; a huge header is refused before any attempt. The
// listener is an edge (use_remote_address) that trusts no address as
// internal, so Envoy strips those headers from every request.
func TestHostileClientsCannotChangeHedging(t *testing.T) {
	up := harness.NewUpstream(t, 0)
	listenPort := serveOnePlan(t, up, []string{"GET"}, 20*time.Millisecond)
	client := &http.Client{Timeout: 10 * time.Second}
	attemptCounts := map[string]string{} // responses that carried the attempt count, by request
	send := func(method, path, id string, header map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", listenPort, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "web.e2e"
		req.Header.Set("x-test-id", id)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if n := resp.Header.Get("x-envoy-attempt-count"); n != "" {
			attemptCounts[id] = n
		}
		return resp.StatusCode
	}

	hostile := map[string]string{
		"x-envoy-max-retries":                    "10",
		"x-envoy-retry-on":                       "5xx,gateway-error,reset,connect-failure,retriable-4xx",
		"x-envoy-retriable-status-codes":         "503",
		"x-envoy-upstream-rq-per-try-timeout-ms": "1",
		"x-envoy-upstream-rq-timeout-ms":         "100000",
		"x-envoy-hedge-on-per-try-timeout":       "true",
		"x-envoy-attempt-count":                  "7",
	}
	withHeaders := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range hostile {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header map[string]string
		want   int // status
		most   int // attempts allowed by the policy
	}{
		{"hedged route, slow upstream", http.MethodGet, "/slow", withHeaders(nil), 200, 2},
		{"hedged route, failing upstream", http.MethodGet, "/fail", withHeaders(nil), 503, 1},
		{"spoofed X-Forwarded-For from a private address", http.MethodGet, "/fail", withHeaders(map[string]string{"x-forwarded-for": "10.0.0.1"}), 503, 1},
		{"spoofed loopback X-Forwarded-For", http.MethodGet, "/slow", withHeaders(map[string]string{"x-forwarded-for": "127.0.0.1"}), 200, 2},
		{"x-envoy-internal", http.MethodGet, "/fail", withHeaders(map[string]string{"x-envoy-internal": "true"}), 503, 1},
		{"unhedged method", http.MethodPost, "/slow", withHeaders(nil), 200, 1},
		{"bypass header", http.MethodGet, "/slow", withHeaders(map[string]string{plan.BypassHeader: "1"}), 200, 1},
		{"bypass header, failing upstream", http.MethodGet, "/fail", withHeaders(map[string]string{plan.BypassHeader: "1", "x-forwarded-for": "10.0.0.1"}), 503, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			if got := send(tc.method, tc.path, id, tc.header); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
			time.Sleep(100 * time.Millisecond) // a late attempt would arrive by now
			if n := up.Attempts(id); n < 1 || n > tc.most {
				t.Errorf("%d attempts reached the upstream, want 1 to %d (the policy's)", n, tc.most)
			}
		})
	}

	t.Run("a huge header", func(t *testing.T) {
		got := send(http.MethodGet, "/slow", "huge", map[string]string{"x-huge": strings.Repeat("a", 100<<10)})
		if got != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("status %d, want 431", got)
		}
		if n := up.Attempts("huge"); n != 0 {
			t.Errorf("%d attempts reached the upstream, want none", n)
		}
	})

	// #23, defect 11: on the bypass and unhedged routes the attempt count
	// reached the client.
	for id, n := range attemptCounts {
		t.Errorf("%s: the response carried %s: %s", id, "x-envoy-attempt-count", n)
	}
	for h := range up.Leaked() {
		t.Errorf("a client's header reached the upstream: %s", h)
	}
}

// serveOnePlan runs the xDS server with one plan for the upstream (hedging
// methods after delay, one hedge) and a real Envoy on it, and returns the
// Envoy listener's port once Envoy runs the plan.
func serveOnePlan(t *testing.T, up *harness.Upstream, methods []string, delay time.Duration, bootstrap ...func(*envoyconf.BootstrapOptions)) uint32 {
	t.Helper()
	return servePlan(t, up, func(p *plan.RoutePlan) {
		p.Match.Methods = methods
		p.Hedge.Delay = delay
	}, bootstrap...)
}

// servePlan is serveOnePlan with the plan changed by mutate.
func servePlan(t *testing.T, up *harness.Upstream, mutate func(*plan.RoutePlan), bootstrap ...func(*envoyconf.BootstrapOptions)) uint32 {
	t.Helper()
	_, listenPort := serveWith(t, up, func(*ServerOptions) {}, mutate, bootstrap...)
	return listenPort
}

// serveWith is servePlan on a server whose options server changes; it
// returns the server too. The plan's policy is e2e/web.
func serveWith(t *testing.T, up *harness.Upstream, server func(*ServerOptions), mutate func(*plan.RoutePlan), bootstrap ...func(*envoyconf.BootstrapOptions)) (*Server, uint32) {
	t.Helper()
	bin := harness.EnvoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	listenPort, adminPort := uint32(harness.Port(t)), uint32(harness.Port(t))
	srv, addr, _ := startServer(t, ctx, listenPort, server)

	key := k8stypes.NamespacedName{Namespace: "e2e", Name: "web"}
	web := plan.RoutePlan{
		Name: "e2e/web", Namespace: "e2e", Service: "web", Port: 80,
		Hosts:     plan.ServiceHosts("web", "e2e", 80),
		Match:     plan.Match{PathPrefix: "/", Methods: []string{"GET"}},
		Hedge:     &plan.Hedge{Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"}},
		Budget:    plan.Budget{Percent: 5, MinConcurrency: 3},
		Endpoints: []plan.Endpoint{up.Endpoint(t)},
	}
	mutate(&web)
	if err := srv.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	srv.MarkSynced(key)
	bo := envoyconf.BootstrapOptions{XDSAddress: addr.String(), NodeID: "e2e-envoy", AdminPort: adminPort, ListenerPort: listenPort}
	for _, f := range bootstrap {
		f(&bo)
	}
	boot, err := envoyconf.Bootstrap(bo)
	if err != nil {
		t.Fatal(err)
	}
	bootPath := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(bootPath, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	startEnvoy(t, bin, bootPath)
	harness.Eventually(t, 60*time.Second, "Envoy to ACK", func() (bool, string) {
		st := srv.Status(key)
		return st.Programmed == 1, fmt.Sprintf("%+v", st)
	})
	return srv, listenPort
}

// TestNonIdempotentNeverDuplicatedAtLoad is #14's "non-idempotent safety at
// load": POST, PUT, PATCH and DELETE at 200 requests a second for 10 s
// through a policy that hedges GET after 1 ms (the API's minimum), to an
// upstream that takes 300 ms: every request executes exactly once.
func TestNonIdempotentNeverDuplicatedAtLoad(t *testing.T) {
	up := harness.NewUpstream(t, 0)
	listenPort := serveOnePlan(t, up, []string{"GET", "HEAD"}, time.Millisecond)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	methods := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	const rate, length = 200, 10 * time.Second
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		byCode  = map[int]int{}
		sent    = map[string]int{}
		failure error
	)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < length; i++ {
		<-tick.C
		method, id := methods[i%len(methods)], fmt.Sprintf("load-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d/slow", listenPort), strings.NewReader("body"))
			if err != nil {
				panic(err)
			}
			req.Host = "web.e2e"
			req.Header.Set("x-test-id", id)
			resp, err := client.Do(req)
			mu.Lock()
			defer mu.Unlock()
			sent[method]++
			if err != nil {
				failure = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			byCode[resp.StatusCode]++
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	if failure != nil {
		t.Fatalf("a request failed: %v", failure)
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	if byCode[http.StatusOK] != total {
		t.Errorf("statuses %v for %d requests, want all 200", byCode, total)
	}
	executions, duplicated := 0, 0
	for id, at := range up.Arrivals() {
		if n := len(at); strings.HasPrefix(id, "load-") {
			executions += n
			if n != 1 {
				duplicated++
			}
		}
	}
	if executions != total || duplicated != 0 {
		t.Errorf("%d executions at the upstream for %d requests (%d requests executed more than once), want exactly one each", executions, total, duplicated)
	}
	t.Logf("%d requests (%v) in %s, %d executions at the upstream, %d requests executed more than once", total, sent, length, executions, duplicated)
}

// TestStatsListenerServesOnlyStats: with the admin interface on loopback,
// the stats listener is what Prometheus and the readiness probe reach. It
// answers GET /stats/prometheus and /ready, and nothing else: the admin
// interface's /quitquitquit and /healthcheck/fail are not reachable through
// it, and Envoy keeps serving.
func TestStatsListenerServesOnlyStats(t *testing.T) {
	up := harness.NewUpstream(t, 0)
	statsPort, adminPort := uint32(harness.Port(t)), uint32(harness.Port(t))
	listenPort := serveOnePlan(t, up, []string{"GET"}, 20*time.Millisecond, func(o *envoyconf.BootstrapOptions) {
		o.AdminAddress, o.AdminPort, o.StatsAddress, o.StatsPort = "127.0.0.1", adminPort, "127.0.0.1", statsPort
	})
	call := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", statsPort, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call(http.MethodGet, "/stats/prometheus"); code != 200 || !strings.Contains(body, "envoy_cluster_upstream_rq_total") {
		t.Errorf("GET /stats/prometheus: %d, Envoy's stats missing (%d bytes)", code, len(body))
	}
	if code, body := call(http.MethodGet, "/ready"); code != 200 || !strings.Contains(body, "LIVE") {
		t.Errorf("GET /ready: %d %q", code, body)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/quitquitquit"}, {http.MethodPost, "/healthcheck/fail"}, {http.MethodGet, "/config_dump"},
		{http.MethodPost, "/stats/prometheus"}, {http.MethodPost, "/logging?level=trace"}, {http.MethodPost, "/runtime_modify?a=b"},
	} {
		if code, _ := call(c.method, c.path); code != http.StatusNotFound {
			t.Errorf("%s %s through the stats listener: %d, want 404", c.method, c.path, code)
		}
	}
	// Envoy still runs and serves its routes.
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", listenPort), nil)
	req.Host = "web.e2e"
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("Envoy after the admin calls: %v %v", err, resp)
	}
	_ = resp.Body.Close()
	if code, body := call(http.MethodGet, "/ready"); code != 200 {
		t.Errorf("GET /ready after the calls: %d %q (healthcheck failed?)", code, body)
	}
}
