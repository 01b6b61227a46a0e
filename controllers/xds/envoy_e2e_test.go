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
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	k8stypes "k8s.io/apimachinery/pkg/types"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

// slowDelay is how long the slow backend takes; hedging must hide it.
const slowDelay = 300 * time.Millisecond

var envoyCount atomic.Int32

// startEnvoy runs Envoy with the bootstrap and stops it by PID when the test
// ends. It returns a func that stops it earlier.
func startEnvoy(t *testing.T, bin, bootstrap string) func() {
	t.Helper()
	baseID := os.Getpid()*10 + int(envoyCount.Add(1))
	p := harness.RunProcess(t, "envoy", t.TempDir(), nil, bin, "-c", bootstrap, "--base-id", strconv.Itoa(baseID),
		"--concurrency", "1", "--log-level", "warn", "--drain-time-s", "1")
	return func() { p.Stop(10 * time.Second) }
}

type envoyClient struct {
	t      *testing.T
	http   *http.Client
	listen string // host:port of the listener
	admin  string // host:port of the admin interface
}

// do sends one request and returns its status and latency.
func (c *envoyClient) do(method, host string, header http.Header) (int, time.Duration) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://"+c.listen+"/item", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, host, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

func (c *envoyClient) adminGet(path string) string {
	c.t.Helper()
	resp, err := c.http.Get("http://" + c.admin + path)
	if err != nil {
		c.t.Fatalf("admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

// counter reads one counter from /stats (0 when Envoy has not created it yet).
func (c *envoyClient) counter(name string) int {
	c.t.Helper()
	out := c.adminGet("/stats?filter=" + "^" + strings.ReplaceAll(name, ".", `\.`) + "$")
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok && k == name {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				c.t.Fatalf("stat %s: %v", name, err)
			}
			return n
		}
	}
	return 0
}

type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l latencies) String() string {
	return fmt.Sprintf("n=%d p50=%s p90=%s max=%s", len(l),
		l.quantile(0.5).Round(100*time.Microsecond), l.quantile(0.9).Round(100*time.Microsecond), slices.Max(l).Round(100*time.Microsecond))
}

// startServer runs an xDS server that programs the listener on
// 127.0.0.1:listenPort until the test ends. It returns the server, where it
// listens, and a context that ends when it stops.
func startServer(t *testing.T, ctx context.Context, listenPort uint32, options ...func(*ServerOptions)) (*Server, net.Addr, context.Context) {
	t.Helper()
	opts := ServerOptions{
		Address:   "127.0.0.1:0",
		Translate: envoyconf.TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: listenPort, HedgeAccountModule: harness.HedgeAccountModule(t)},
		Logger:    testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	}
	for _, o := range options {
		o(&opts)
	}
	srv := NewServer(opts)
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Start(srvCtx) }()
	t.Cleanup(func() {
		stopSrv()
		select {
		case <-srvDone:
		case <-time.After(10 * time.Second):
			t.Error("xDS server did not stop")
		}
	})
	return srv, addr, srvCtx
}

// TestEnvoyEndToEnd runs the xDS server against a real Envoy and three
// backends, one of them slow, and checks that hedging hides the slow one.
func TestEnvoyEndToEnd(t *testing.T) {
	bin := harness.EnvoyBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	slow, fast1, fast2 := harness.NewUpstream(t, slowDelay), harness.NewUpstream(t, 0), harness.NewUpstream(t, 0)
	listenPort, adminPort := uint32(harness.Port(t)), uint32(harness.Port(t))

	srv, addr, srvCtx := startServer(t, ctx, listenPort)
	var eventsSeen atomic.Int64
	go func() {
		for {
			select {
			case <-srvCtx.Done():
				return
			case <-srv.Events():
				eventsSeen.Add(1)
			}
		}
	}()

	webKey := k8stypes.NamespacedName{Namespace: "e2e", Name: "web"}
	web := plan.RoutePlan{
		Name: "e2e/web", Namespace: "e2e", Service: "web", Port: 80,
		Hosts: plan.ServiceHosts("web", "e2e", 80),
		Match: plan.Match{PathPrefix: "/", Methods: []string{"GET", "HEAD"}},
		Hedge: &plan.Hedge{Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"}},
		// One request in three meets the slow backend and needs a hedge: a
		// budget that allows them all (the hedge account lets 100% through), so the test
		// sees Envoy's hedging itself; TestHedgeAccountCapsTheRate checks the cap.
		Budget: plan.Budget{Percent: 100, MinConcurrency: 3},
	}
	for _, b := range []*harness.Upstream{slow, fast1, fast2} {
		web.Endpoints = append(web.Endpoints, b.Endpoint(t))
	}
	slices.SortFunc(web.Endpoints, func(a, b plan.Endpoint) int { return int(a.Port) - int(b.Port) })
	// A second plan whose only endpoint is the slow backend: its bypass
	// requests must take the full slowDelay.
	slowOnly := plan.RoutePlan{
		Name: "e2e/slow", Namespace: "e2e", Service: "slow", Port: 80,
		Hosts:     plan.ServiceHosts("slow", "e2e", 80),
		Match:     web.Match,
		Hedge:     web.Hedge,
		Budget:    web.Budget,
		Endpoints: []plan.Endpoint{slow.Endpoint(t)},
	}
	for _, p := range []plan.RoutePlan{web, slowOnly} {
		if err := srv.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	if srv.Version() != "" {
		t.Fatal("the server published a snapshot before MarkSynced")
	}
	srv.MarkSynced(webKey, k8stypes.NamespacedName{Namespace: "e2e", Name: "slow"})
	v1 := srv.Status(webKey).Version
	if v1 == "" {
		t.Fatal("no snapshot after MarkSynced with every expected policy published")
	}

	boot, err := envoyconf.Bootstrap(envoyconf.BootstrapOptions{XDSAddress: addr.String(), NodeID: "e2e-envoy", AdminPort: adminPort, ListenerPort: listenPort})
	if err != nil {
		t.Fatal(err)
	}
	bootPath := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(bootPath, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	stopEnvoy := startEnvoy(t, bin, bootPath)
	c := &envoyClient{
		t:      t,
		http:   &http.Client{Timeout: 10 * time.Second},
		listen: fmt.Sprintf("127.0.0.1:%d", listenPort),
		admin:  fmt.Sprintf("127.0.0.1:%d", adminPort),
	}
	programmed := func(version string) func() (bool, string) {
		return func() (bool, string) {
			st := srv.Status(webKey)
			return st.Connected == 1 && st.Programmed == 1 && st.Serving == 1 && st.Version == version && st.Rejected == "", fmt.Sprintf("%+v", st)
		}
	}
	harness.Eventually(t, 60*time.Second, "Envoy to ACK the first version", programmed(v1))
	harness.Eventually(t, 30*time.Second, "Envoy to be ready", func() (bool, string) {
		resp, err := c.http.Get("http://" + c.admin + "/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	if eventsSeen.Load() == 0 {
		harness.Eventually(t, 5*time.Second, "an event after the ACK", func() (bool, string) { return eventsSeen.Load() > 0, "none" })
	}

	// (a) The configuration Envoy runs carries the hedge settings.
	dump := c.adminGet("/config_dump")
	for _, want := range []string{`"hedge_on_per_try_timeout": true`, `"per_try_timeout": "0.020s"`, `"retry_budget"`, `"budget_percent"`, `"envoy.retry_host_predicates.previous_hosts"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("config_dump lacks %s", want)
		}
	}
	cluster := plan.ClusterName("e2e", "web", 80)

	// (b) Hedged GETs never wait for the slow backend.
	retry0, total0 := c.counter("cluster."+cluster+".upstream_rq_retry"), c.counter("cluster."+cluster+".upstream_rq_total")
	const gets = 60
	var hedged latencies
	for range gets {
		code, d := c.do(http.MethodGet, "web.e2e", nil)
		if code != http.StatusOK {
			t.Fatalf("GET: status %d", code)
		}
		hedged = append(hedged, d)
	}
	retries := c.counter("cluster."+cluster+".upstream_rq_retry") - retry0
	attempts := c.counter("cluster."+cluster+".upstream_rq_total") - total0
	t.Logf("hedged GET (delay 20ms, 1 hedge): %s; slow backend got %d of %d first attempts; upstream_rq_retry +%d, upstream_rq_total +%d",
		hedged, slow.Count("GET"), gets, retries, attempts)
	if max := slices.Max(hedged); max >= 150*time.Millisecond {
		t.Errorf("slowest hedged GET took %s; hedging should keep every GET well under the slow backend's %s", max, slowDelay)
	}
	if slow.Count("GET") < gets/6 {
		t.Errorf("the slow backend saw only %d of %d GETs; round robin should send it about a third", slow.Count("GET"), gets)
	}
	// (c) Hedges show as retries.
	if retries < slow.Count("GET")/2 || retries == 0 {
		t.Errorf("upstream_rq_retry went up by %d; expected about one per slow first attempt (%d)", retries, slow.Count("GET"))
	}
	// (d) Envoy reset the losing attempts on the slow backend.
	harness.Eventually(t, 5*time.Second, "cancelled attempts at the slow backend", func() (bool, string) {
		return slow.Cancelled() > 0, "none cancelled"
	})
	t.Logf("slow backend: %d GET attempts, %d cancelled by Envoy", slow.Count("GET"), slow.Cancelled())

	// (e) POST is not hedged: each reaches the backends exactly once, through
	// the bypass cluster, so the hedged cluster's stats, which the estimator
	// reads, describe only the hedged route.
	hedgedTotal := c.counter("cluster." + cluster + ".upstream_rq_total")
	const posts = 9
	var postLat latencies
	for range posts {
		code, d := c.do(http.MethodPost, "web.e2e", nil)
		if code != http.StatusOK {
			t.Fatalf("POST: status %d", code)
		}
		postLat = append(postLat, d)
	}
	gotPosts := slow.Count("POST") + fast1.Count("POST") + fast2.Count("POST")
	t.Logf("unhedged POST: %s; backends counted %d POSTs for %d sent", postLat, gotPosts, posts)
	if gotPosts != posts {
		t.Errorf("backends counted %d POSTs for %d sent: POST must never be hedged or retried", gotPosts, posts)
	}

	// (f) Bypass requests are never hedged.
	bypass := http.Header{"X-Tailcut-Bypass": []string{"1"}}
	var bypassWeb, bypassSlow latencies
	for range 6 {
		_, d := c.do(http.MethodGet, "web.e2e", bypass)
		bypassWeb = append(bypassWeb, d)
	}
	for range 3 {
		code, d := c.do(http.MethodGet, "slow.e2e", bypass)
		if code != http.StatusOK {
			t.Fatalf("bypass GET: status %d", code)
		}
		bypassSlow = append(bypassSlow, d)
	}
	t.Logf("bypass GET to web (3 backends): %s", bypassWeb)
	t.Logf("bypass GET to the slow backend only: %s", bypassSlow)
	if slices.Max(bypassWeb) < slowDelay {
		t.Errorf("no bypass GET to web took %s or more; round robin must have sent one of 6 to the slow backend", slowDelay)
	}
	if slices.Min(bypassSlow) < slowDelay {
		t.Errorf("a bypass GET to the slow backend took %s, less than its %s: it was hedged", slices.Min(bypassSlow), slowDelay)
	}
	if n := c.counter("cluster." + plan.BypassClusterName("e2e", "web", 80) + ".upstream_rq_retry"); n != 0 {
		t.Errorf("bypass cluster upstream_rq_retry = %d, want 0", n)
	}
	if n := c.counter("cluster." + plan.BypassClusterName("e2e", "web", 80) + ".upstream_rq_total"); n != posts+6 {
		t.Errorf("bypass cluster upstream_rq_total = %d, want %d POSTs + 6 bypass GETs", n, posts)
	}
	if n := c.counter("cluster." + cluster + ".upstream_rq_total"); n != hedgedTotal {
		t.Errorf("hedged cluster upstream_rq_total went from %d to %d on POSTs and bypass GETs: the estimator would read them", hedgedTotal, n)
	}
	// The bootstrap's fine buckets reach Prometheus under envoy_cluster_name.
	prom := c.adminGet("/stats/prometheus")
	if want := `envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="` + cluster + `",le="22"}`; !strings.Contains(prom, want) {
		t.Errorf("/stats/prometheus lacks %s", want)
	}
	// Bounded stats (#12): a cluster exports what tailcut, its dashboards and
	// alerts read, not Envoy's whole set: 1,000 policies must not mean
	// hundreds of thousands of series.
	// Its per-endpoint stats, which find a slow endpoint, add a fixed set per
	// endpoint.
	series, perEndpoint := 0, map[string]int{}
	for _, l := range strings.Split(prom, "\n") {
		if strings.HasPrefix(l, "#") || !strings.Contains(l, `envoy_cluster_name="`+cluster+`"`) {
			continue
		}
		if _, rest, ok := strings.Cut(l, `envoy_endpoint_address="`); ok {
			address, _, _ := strings.Cut(rest, `"`)
			perEndpoint[address]++
			continue
		}
		series++
	}
	t.Logf("the hedged cluster exports %d Prometheus series, and per endpoint %v", series, perEndpoint)
	if series > 70 {
		t.Errorf("the hedged cluster exports %d Prometheus series, want at most 70 (the latency histogram and a few counters)", series)
	}
	if len(perEndpoint) == 0 {
		t.Error("the hedged cluster exports no per-endpoint series: the estimator cannot find a slow endpoint")
	}
	for address, n := range perEndpoint {
		if n > 10 {
			t.Errorf("endpoint %s: %d series, want at most 10 (requests, in flight, errors, connections)", address, n)
		}
	}

	// (g) A new delay is a new version, ACKed without restarting Envoy, and
	// only the routes travel: listeners, clusters and endpoints keep their
	// versions, so Envoy receives no LDS, CDS or EDS update (issue #12).
	updates := func() map[string]int {
		return map[string]int{
			"LDS": c.counter("listener_manager.lds.update_success"), "CDS": c.counter("cluster_manager.cds.update_success"),
			"RDS": c.counter("http." + envoyconf.StatPrefix + ".rds." + envoyconf.RouteConfigName + ".update_success"),
			"EDS": c.counter("cluster." + cluster + ".update_success"),
		}
	}
	before := updates()
	web.Hedge = &plan.Hedge{Delay: 30 * time.Millisecond, MaxHedges: 1, RetryOn: web.Hedge.RetryOn}
	if err := srv.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	v2 := srv.Status(webKey).Version
	if v2 == v1 {
		t.Fatal("changing the delay did not change the version")
	}
	harness.Eventually(t, 30*time.Second, "Envoy to ACK the 30ms version", programmed(v2))
	if dump := c.adminGet("/config_dump?resource=dynamic_route_configs"); !strings.Contains(dump, `"per_try_timeout": "0.030s"`) {
		t.Error("config_dump does not show the 30ms delay after the ACK")
	}
	t.Logf("delay 20ms -> 30ms: version %s -> %s, programmed %+v", v1, v2, srv.Status(webKey))
	after := updates()
	t.Logf("Envoy's update_success counters before %v, after %v", before, after)
	for typ, n := range after {
		if want := before[typ] + map[bool]int{true: 1}[typ == "RDS"]; n != want {
			t.Errorf("%s updates went from %d to %d on a delay change, want %d: only the routes should travel", typ, before[typ], n, want)
		}
	}
	pushes := testutil.ToFloat64(pushesTotal)
	if err := srv.Publish(ctx, publish.Owner{}, web); err != nil || srv.Status(webKey).Version != v2 || testutil.ToFloat64(pushesTotal) != pushes {
		t.Errorf("publishing the same plan again pushed a new version (err %v)", err)
	}
	// An endpoint leaving is an EDS push only, and coming back another one.
	for i, eps := range [][]plan.Endpoint{web.Endpoints[1:], web.Endpoints} {
		before := updates()
		web.Endpoints = eps
		if err := srv.Publish(ctx, publish.Owner{}, web); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 30*time.Second, "Envoy to ACK the endpoint change", programmed(srv.Status(webKey).Version))
		harness.Eventually(t, 10*time.Second, "the EDS update to count", func() (bool, string) {
			return updates()["EDS"] == before["EDS"]+1, fmt.Sprint(updates())
		})
		after := updates()
		for typ, n := range after {
			if want := before[typ] + map[bool]int{true: 1}[typ == "EDS"]; n != want {
				t.Errorf("endpoint change %d: %s updates went from %d to %d, want %d", i, typ, before[typ], n, want)
			}
		}
	}

	// (h) A route Envoy rejects (bad RE2) is NACKed; the last good config keeps serving.
	nacks := testutil.ToFloat64(nacksTotal.WithLabelValues("RDS"))
	srv.translator.MutateVirtualHost = func(vh *routev3.VirtualHost) {
		for _, rt := range vh.Routes {
			for _, h := range rt.GetMatch().GetHeaders() {
				if re := h.GetStringMatch().GetSafeRegex(); re != nil {
					h.GetStringMatch().MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "^(GET|HEAD"}}
				}
			}
		}
	}
	if err := srv.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatalf("the bad regex must pass proto validation and reach Envoy: %v", err)
	}
	v3 := srv.Status(webKey).Version
	harness.Eventually(t, 30*time.Second, "Envoy to NACK the bad regex", func() (bool, string) {
		st := srv.Status(webKey)
		return st.Version == v3 && st.Rejected != "" && st.Programmed == 0, fmt.Sprintf("%+v", st)
	})
	st := srv.Status(webKey)
	t.Logf("NACK of version %s: %+v", v3, st)
	if !strings.Contains(st.Rejected, "RDS") || !strings.Contains(st.Rejected, "e2e-envoy") {
		t.Errorf("Rejected should name the node and the type: %q", st.Rejected)
	}
	if got := testutil.ToFloat64(nacksTotal.WithLabelValues("RDS")); got <= nacks {
		t.Errorf("tailcut_xds_nacks_total{type=RDS} = %v, want more than %v", got, nacks)
	}
	// The NACK is not answered with the same bad version over and over.
	time.Sleep(500 * time.Millisecond)
	if got := testutil.ToFloat64(nacksTotal.WithLabelValues("RDS")); got > nacks+2 {
		t.Errorf("tailcut_xds_nacks_total{type=RDS} went from %v to %v: the rejected version is being re-sent", nacks, got)
	}
	var afterNack latencies
	for range 15 {
		code, d := c.do(http.MethodGet, "web.e2e", nil)
		if code != http.StatusOK {
			t.Fatalf("GET after NACK: status %d", code)
		}
		afterNack = append(afterNack, d)
	}
	t.Logf("hedged GET while the bad version is rejected (still 30ms config): %s", afterNack)
	if slices.Max(afterNack) >= 150*time.Millisecond {
		t.Errorf("after the NACK a GET took %s: the last good, hedged config should keep serving", slices.Max(afterNack))
	}
	if dump := c.adminGet("/config_dump?resource=dynamic_route_configs"); !strings.Contains(dump, `"per_try_timeout": "0.030s"`) || strings.Contains(dump, "^(GET|HEAD\"") {
		t.Error("after the NACK Envoy should still run the 30ms config")
	}

	// Fixing the plan set publishes a good version again.
	srv.translator.MutateVirtualHost = nil
	if err := srv.Publish(ctx, publish.Owner{}, web); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "Envoy to ACK the fixed version", programmed(srv.Status(webKey).Version))

	// A proxy that leaves is no longer counted.
	stopEnvoy()
	harness.Eventually(t, 15*time.Second, "the stream to close", func() (bool, string) {
		st := srv.Status(webKey)
		return st.Connected == 0, fmt.Sprintf("%+v", st)
	})
}

// TestEnvoyWaitsForItsFirstConfig is issue #12's defect 8: Envoy gives up on
// its first CDS, then LDS, after 15s each (the default initial_fetch_timeout) and
// reports ready with no listener, so a proxy that starts while the operator
// has not synced would take traffic it cannot route. tailcut's bootstrap makes
// it wait: not ready well past 15s, ready once the server serves.
func TestEnvoyWaitsForItsFirstConfig(t *testing.T) {
	t.Parallel()
	bin := harness.EnvoyBin(t)
	listenPort, adminPort := uint32(harness.Port(t)), uint32(harness.Port(t))
	srv := NewServer(ServerOptions{
		Address:   "127.0.0.1:0",
		Translate: envoyconf.TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: listenPort, HedgeAccountModule: harness.HedgeAccountModule(t)},
		Logger:    testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	})
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	boot, err := envoyconf.Bootstrap(envoyconf.BootstrapOptions{XDSAddress: addr.String(), NodeID: "waiting-envoy", AdminPort: adminPort})
	if err != nil {
		t.Fatal(err)
	}
	bootPath := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(bootPath, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	startEnvoy(t, bin, bootPath)
	admin := &http.Client{Timeout: 2 * time.Second}
	ready := func() (bool, string) {
		resp, err := admin.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", adminPort))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
	}
	// Wait until the admin interface answers, then past Envoy's defaults: 15s
	// for the first CDS, then 15s for the first LDS.
	harness.Eventually(t, 30*time.Second, "Envoy's admin interface", func() (bool, string) {
		_, state := ready()
		return state != "" && !strings.Contains(state, "connection refused"), state
	})
	time.Sleep(35 * time.Second)
	if ok, state := ready(); ok {
		t.Fatalf("Envoy reports ready (%s) with no configuration from tailcut", state)
	}
	srv.MarkSynced()
	harness.Eventually(t, 30*time.Second, "Envoy ready once tailcut serves", ready)
}
