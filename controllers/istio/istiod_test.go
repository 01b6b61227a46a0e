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
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// replica is a backend that counts what reaches it: attempts by method and
// by x-envoy-attempt-count, and executions (requests it served to the end).
// It answers after its delay, or after slowPathDelay for a path with /slow-.
type replica struct {
	srv      *httptest.Server
	mu       sync.Mutex
	attempts map[string]int // "GET/1", "POST/2", ...
	executed map[string]int // by method
}

func newReplica(t *testing.T, delay time.Duration) *replica {
	r := &replica{attempts: map[string]int{}, executed: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.attempts[req.Method+"/"+req.Header.Get("x-envoy-attempt-count")]++
		r.mu.Unlock()
		wait := delay
		if strings.Contains(req.URL.Path, "/slow-") {
			wait = slowPathDelay
		}
		select {
		case <-time.After(wait):
		case <-req.Context().Done():
			return // a hedge's loser, cancelled by Envoy
		}
		r.mu.Lock()
		r.executed[req.Method]++
		r.mu.Unlock()
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// slowPathDelay is how long any replica takes for a path with /slow-.
const slowPathDelay = 300 * time.Millisecond

func (r *replica) port() int { return r.srv.Listener.Addr().(*net.TCPAddr).Port }

// restart stops the replica as a restarting pod stops (its connections
// closed, its port refusing) for down, then serves on the same port again.
func (r *replica) restart(t *testing.T, down time.Duration) {
	addr := r.srv.Listener.Addr().String()
	_ = r.srv.Listener.Close()
	r.srv.CloseClientConnections()
	time.Sleep(down)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("restarting the replica on %s: %v", addr, err)
		return
	}
	r.srv.Listener = l
	go func() { _ = r.srv.Config.Serve(l) }()
}

// duringRestart sends GETs at 20 a second for 3 s through an Envoy listener
// while r restarts (down from 1 to 2 s in), and returns the statuses.
func duringRestart(t *testing.T, listenPort int, host string, port int, r *replica) map[int]int {
	t.Helper()
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		time.Sleep(time.Second)
		r.restart(t, time.Second)
	})
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := range 60 {
		<-tick.C
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item/restart-%d", listenPort, i), nil)
			req.Host = fmt.Sprintf("%s:%d", host, port)
			code := 0
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

func (r *replica) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts, r.executed = map[string]int{}, map[string]int{}
}

func (r *replica) counts() (map[string]int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps(r.attempts), maps(r.executed)
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// sidecarBootstrap makes Envoy a sidecar of namespace demo for istiod's RDS
// only: upstream Envoy cannot load istiod's clusters (they carry the
// Istio-only istio.metadata_exchange), so the Service's cluster is static,
// named as istiod names it, with the two replicas as endpoints. filters go
// before the router, as JSON objects (HTTP filters istiod rendered). The
// admin interface binds port 0: --admin-address-path says where it is.
func sidecarBootstrap(listenPort, istiodGRPC int, routeConfig, cluster string, filters []string, replicas ...int) string {
	var eps, fs strings.Builder
	for _, p := range replicas {
		fmt.Fprintf(&eps, "        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}\n", p)
	}
	for _, f := range filters {
		fmt.Fprintf(&fs, "          - %s\n", f)
	}
	return fmt.Sprintf(`node:
  id: sidecar~127.0.0.10~client.demo~demo.svc.cluster.local
  cluster: client.demo
  metadata: {NAMESPACE: demo, CLUSTER_ID: Kubernetes, ISTIO_VERSION: "1.31.0", LABELS: {app: client}}
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
# As Istio's bootstrap: no default tag extractors, so route stats keep the
# virtual host and the stat prefix in their names.
stats_config: {use_all_default_tags: false}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: istiod}}]
static_resources:
  listeners:
  - name: outbound
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: outbound
          rds: {route_config_name: %q, config_source: {ads: {}, resource_api_version: V3}}
          http_filters:
%s          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: istiod
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: istiod
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}}]}]
  - name: %q
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: %q
      endpoints:
      - lb_endpoints:
%s`, listenPort, routeConfig, fs.String(), istiodGRPC, cluster, cluster, eps.String())
}

// sendTo sends n requests to an Envoy listener with the Service's Host
// header, from workers goroutines, and returns the median, the p99 and the
// statuses (0 for a transport error).
func sendTo(listenPort int, host string, port int, method string, n, workers int) (p50, p99 time.Duration, codes map[int]int) {
	codes = map[int]int{}
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	next := make(chan int)
	cl := &http.Client{Timeout: 5 * time.Second}
	for range workers {
		wg.Go(func() {
			for i := range next {
				req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d/item/%d", listenPort, i), strings.NewReader("x"))
				req.Host = fmt.Sprintf("%s:%d", host, port)
				start := time.Now()
				resp, err := cl.Do(req)
				code := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				if err == nil {
					lat = append(lat, time.Since(start))
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.Sort(lat)
	if len(lat) == 0 {
		return 0, 0, codes
	}
	return lat[len(lat)/2], lat[len(lat)*99/100], codes
}

// measureAt sends n requests through an Envoy listener and returns their p99,
// the attempts the replicas saw ("slow GET/2": a hedge at the slow replica)
// and the executions by method.
func measureAt(t *testing.T, label string, listenPort int, host string, port int, method string, n, workers int, slow, fast *replica) (time.Duration, map[string]int, map[string]int) {
	t.Helper()
	slow.reset()
	fast.reset()
	p50, p99, codes := sendTo(listenPort, host, port, method, n, workers)
	time.Sleep(300 * time.Millisecond) // the slow replica's cancelled attempts end
	sa, se := slow.counts()
	fa, fe := fast.counts()
	t.Logf("%s: %d %s: p50 %s, p99 %s, statuses %v; slow replica attempts %v executed %v; fast replica attempts %v executed %v",
		label, n, method, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), codes, sa, se, fa, fe)
	if codes[http.StatusOK] != n {
		t.Errorf("%s: statuses %v for %d requests", label, codes, n)
	}
	exec := map[string]int{}
	for m, v := range se {
		exec[m] += v
	}
	for m, v := range fe {
		exec[m] += v
	}
	att := map[string]int{}
	for k, v := range sa {
		att["slow "+k] = v
	}
	for k, v := range fa {
		att["fast "+k] = v
	}
	return p99, att, exec
}

func filterNames(filters []*hcmv3.HttpFilter) []string {
	var names []string
	for _, f := range filters {
		names = append(names, f.GetName())
	}
	return names
}

// istiodResources asks istiod over ADS, as a sidecar of namespace demo would,
// for its resources of one type.
func istiodResources(grpcPort int, typeURL string) ([]*anypb.Any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "demo", "CLUSTER_ID": "Kubernetes", "ISTIO_VERSION": "1.31.0", "LABELS": map[string]any{"app": "lister"}})
	if err != nil {
		return nil, err
	}
	node := &corev3.Node{Id: "sidecar~127.0.0.11~lister.demo~demo.svc.cluster.local", Cluster: "lister.demo", Metadata: md}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	return resp.GetResources(), nil
}

// listenerHTTPFilters returns the HTTP filters of the first HTTP connection
// manager of the listener istiod gives a sidecar of namespace demo, with the
// names of all the listeners it got.
func listenerHTTPFilters(grpcPort int, listener string) ([]*hcmv3.HttpFilter, []string, error) {
	resources, err := istiodResources(grpcPort, resourcev3.ListenerType)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, r := range resources {
		var l listenerv3.Listener
		if err := r.UnmarshalTo(&l); err != nil {
			return nil, names, err
		}
		names = append(names, l.GetName())
		if l.GetName() != listener {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetName() == "envoy.filters.network.http_connection_manager" && f.GetTypedConfig().UnmarshalTo(&hcm) == nil {
					return hcm.GetHttpFilters(), names, nil
				}
			}
		}
	}
	return nil, names, nil
}

// istiodCluster is the cluster named name that istiod gives a sidecar of
// namespace demo, or nil.
func istiodCluster(grpcPort int, name string) (*clusterv3.Cluster, error) {
	resources, err := istiodResources(grpcPort, resourcev3.ClusterType)
	if err != nil {
		return nil, err
	}
	for _, r := range resources {
		var c clusterv3.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			return nil, err
		}
		if c.GetName() == name {
			return &c, nil
		}
	}
	return nil, nil
}

// TestIstiodMergesTheHedgeIntoEnvoy is #13's proof with real parts: a real
// API server with Istio's CRDs, a real istiod (pilot-discovery, ISTIOD_BIN),
// a real Envoy (ENVOY_BIN) that takes its routes from istiod as a sidecar of
// namespace demo, and two replicas of a Service (a ServiceEntry with loopback
// endpoints: the API server refuses loopback addresses in EndpointSlices),
// one 200 ms slow, one 5 ms. The publisher writes the policy's EnvoyFilter;
// the route Envoy then holds carries the hedge, a GET that meets the slow
// replica is answered by a hedge to the fast one, and a POST is executed
// exactly once. istiod's listener carries the policy's hedge account, and an
// Envoy running it hedges 5% of the requests when half are slow. A delay change reaches Envoy; removing the filter takes the
// hedge away.
func TestIstiodMergesTheHedgeIntoEnvoy(t *testing.T) {
	istiod, envoy := harness.Binary(t, "ISTIOD_BIN", "istiod"), harness.EnvoyBin(t)
	crds, err := envtestutil.IstioCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env, cfg, err := envtestutil.Start(crds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := envtestutil.WriteKubeconfig(env, "istiod", kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"istio-system", "demo"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	slow, fast := newReplica(t, 200*time.Millisecond), newReplica(t, 5*time.Millisecond)
	const port = 8080
	host := Host("backend", "demo")
	entry := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
		"metadata": map[string]any{"name": "backend", "namespace": "demo"},
		"spec": map[string]any{
			"hosts": []any{host}, "location": "MESH_INTERNAL", "resolution": "STATIC",
			"ports":     []any{map[string]any{"number": int64(port), "name": "http", "protocol": "HTTP"}},
			"endpoints": []any{map[string]any{"address": "127.0.0.1", "ports": map[string]any{"http": int64(slow.port())}}, map[string]any{"address": "127.0.0.1", "ports": map[string]any{"http": int64(fast.port())}}},
		},
	}}
	if err := c.Create(ctx, entry); err != nil {
		t.Fatal(err)
	}

	mesh := filepath.Join(dir, "mesh.yaml")
	httpPort, grpcPort, monPort, ctrlzPort := harness.Port(t), harness.Port(t), harness.Port(t), harness.Port(t)
	if err := os.WriteFile(mesh, []byte(fmt.Sprintf("rootNamespace: istio-system\ntrustDomain: cluster.local\ndefaultConfig: {discoveryAddress: 127.0.0.1:%d}\n", grpcPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	networks := filepath.Join(dir, "meshNetworks.yaml")
	if err := os.WriteFile(networks, []byte("networks: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every listener on loopback; no CA, no injector, no validation webhook:
	// the test needs only istiod's config translation and its plain xDS.
	harness.RunProcess(t, "istiod", dir, []string{"POD_NAMESPACE=istio-system", "ENABLE_CA_SERVER=false", "INJECT_ENABLED=false", "VALIDATION_WEBHOOK_CONFIG_NAME="},
		istiod, "discovery", "--kubeconfig", kubeconfig, "--meshConfig", mesh, "--networksConfig", networks,
		"--httpAddr", "127.0.0.1:"+strconv.Itoa(httpPort), "--grpcAddr", "127.0.0.1:"+strconv.Itoa(grpcPort),
		"--secureGRPCAddr", "", "--httpsAddr", "", "--monitoringAddr", "127.0.0.1:"+strconv.Itoa(monPort),
		"--ctrlz_address", "127.0.0.1", "--ctrlz_port", strconv.Itoa(ctrlzPort),
		"--domain", "cluster.local", "--registries", "Kubernetes", "--clusterID", "Kubernetes")
	harness.Eventually(t, 120*time.Second, "istiod /ready", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", httpPort))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	listenPort := harness.Port(t)
	boot, adminPath := filepath.Join(dir, "envoy.yaml"), filepath.Join(dir, "envoy-admin-address")
	cluster := fmt.Sprintf("outbound|%d||%s", port, host)
	if err := os.WriteFile(boot, []byte(sidecarBootstrap(listenPort, grpcPort, strconv.Itoa(port), cluster, nil, slow.port(), fast.port())), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.RunProcess(t, "envoy", dir, nil, envoy, "-c", boot, "--admin-address-path", adminPath, "--concurrency", "1", "--base-id", strconv.Itoa(os.Getpid()%50000+7), "-l", "warning")
	admin := harness.AddressFromFile(t, adminPath, 60*time.Second)

	// The route Envoy holds for the Service's virtual host, with its version.
	routes := func() (string, []map[string]any) {
		resp, err := http.Get("http://" + admin + "/config_dump?resource=dynamic_route_configs")
		if err != nil {
			return "", nil
		}
		defer resp.Body.Close()
		var dump struct {
			Configs []struct {
				VersionInfo string `json:"version_info"`
				RouteConfig struct {
					VirtualHosts []struct {
						Name   string           `json:"name"`
						Routes []map[string]any `json:"routes"`
					} `json:"virtual_hosts"`
				} `json:"route_config"`
			} `json:"configs"`
		}
		if json.NewDecoder(resp.Body).Decode(&dump) != nil || len(dump.Configs) == 0 {
			return "", nil
		}
		for _, vh := range dump.Configs[0].RouteConfig.VirtualHosts {
			if vh.Name == host+":"+strconv.Itoa(port) {
				return dump.Configs[0].VersionInfo, vh.Routes
			}
		}
		return dump.Configs[0].VersionInfo, nil
	}
	harness.Eventually(t, 60*time.Second, "Envoy to hold istiod's route for "+host, func() (bool, string) {
		v, rs := routes()
		return len(rs) > 0, "version " + v
	})
	_, before := routes()
	t.Logf("istiod's route before tailcut: %s", compact(before))
	// The mesh's own retries carry requests across a replica's restart; the
	// same run with tailcut's filter and patch comes later (#23, defect 4).
	meshCodes := duringRestart(t, listenPort, host, port, fast)
	t.Logf("60 GETs at 20/s while a replica restarts, istiod's routes alone: statuses %v", meshCodes)

	measure := func(label, method string, n int) (time.Duration, map[string]int, map[string]int) {
		return measureAt(t, label, listenPort, host, port, method, n, 1, slow, fast)
	}
	baseP99, _, _ := measure("before tailcut", http.MethodGet, 100)

	// Publish, as the operator does.
	policy := istioPolicy("demo", "backend", "backend", port)
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	rp := plan.RoutePlan{
		Name: "demo/backend", Namespace: "demo", Service: "backend", Port: port,
		Hosts:  plan.ServiceHosts("backend", "demo", port),
		Match:  plan.Match{PathPrefix: "/", Methods: []string{"GET", "HEAD"}},
		Hedge:  &plan.Hedge{Delay: 20 * time.Millisecond, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"}},
		Budget: plan.Budget{Percent: 5, MinConcurrency: 3},
	}
	module, err := LoadAccountModule(harness.HedgeAccountModule(t))
	if err != nil {
		t.Fatal(err)
	}
	pub := &Publisher{Client: c, Reader: c, AccountModule: module}
	hedged := func(perTry string) func() (bool, string) {
		return func() (bool, string) {
			v, rs := routes()
			s := compact(rs)
			return strings.Contains(s, `"hedge_on_per_try_timeout":true`) && strings.Contains(s, `"per_try_timeout":"`+perTry+`"`) &&
				strings.Contains(s, `"name":"`+UnhedgedRouteName+`"`), "version " + v + ": " + s
		}
	}
	start := time.Now()
	if err := pub.Publish(ctx, ownerOf(policy), rp); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the hedge in Envoy's route", hedged("0.020s"))
	_, after := routes()
	t.Logf("in Envoy %.1f s after the EnvoyFilter was written; the routes Envoy holds:\n%s", time.Since(start).Seconds(), compact(after))
	// istiod's order: the bypass route, the unhedged route, then its own,
	// hedged, routes.
	if len(after) < 3 || after[0]["name"] != BypassRouteName(rp.Name) || after[1]["name"] != UnhedgedRouteName ||
		strings.Contains(compact(after[0]), "hedge_policy") || !strings.Contains(compact(after[len(after)-1]), "hedge_policy") {
		t.Errorf("want %s, then %s, then the hedged routes; got %s", BypassRouteName(rp.Name), UnhedgedRouteName, compact(after))
	}

	// A real Prometheus scrapes the sidecar from here on, for the
	// dashboards (checkMeshDashboards).
	prom := harness.StartPrometheus(t, "/stats/prometheus", admin, operatorSeries(t))

	p99, att, _ := measure("hedged", http.MethodGet, 100)
	hedges := att["fast GET/2"] + att["slow GET/2"]
	if p99 > 120*time.Millisecond || p99 > baseP99/2 {
		t.Errorf("hedged GET p99 %s (before: %s): the slow replica's requests should be answered by a hedge after 20 ms", p99, baseP99)
	}
	if att["fast GET/2"] < 30 {
		t.Errorf("attempts %v: want hedges (x-envoy-attempt-count 2) at the fast replica for the GETs that met the slow one", att)
	}
	_, att, exec := measure("POST through the hedged virtual host", http.MethodPost, 40)
	if exec["POST"] != 40 || att["fast POST/2"]+att["slow POST/2"] != 0 {
		t.Errorf("40 POSTs: %d executions, attempts %v; want each executed once and never hedged", exec["POST"], att)
	}
	// GETs with the bypass header take the bypass route: the ones that meet
	// the slow replica wait for it, never hedged.
	slow.reset()
	fast.reset()
	for i := range 10 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item/%d", listenPort, i), nil)
		req.Host = fmt.Sprintf("%s:%d", host, port)
		req.Header.Set(plan.BypassHeader, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("bypass GET: %s, want 200", resp.Status)
		}
	}
	sa, _ := slow.counts()
	fa, _ := fast.counts()
	t.Logf("10 bypass GETs: slow replica attempts %v; fast replica attempts %v", sa, fa)
	if sa["GET/1"] == 0 || len(sa) != 1 || len(fa) > 1 || fa["GET/2"] != 0 {
		t.Errorf("10 bypass GETs: want some at the slow replica, and only first attempts (never hedged)")
	}

	// Each route tailcut patched counts its own traffic, under the names the
	// estimator reads (#23, defect 8): the hedged route the 100 GETs and their
	// hedges, never the POSTs or the bypass GETs, which share its cluster.
	vhost := plan.MeshVirtualHost("demo", "backend", port)
	type routeCount struct {
		prefix                 string
		answered, sent, hedged float64
	}
	want := []routeCount{
		{plan.MeshHedgedStatPrefix, 100, float64(100 + hedges), float64(hedges)},
		{plan.MeshUnhedgedStatPrefix, 40, 40, 0},
		{plan.MeshBypassStatPrefix, 10, 10, 0},
	}
	got := func() []routeCount {
		stats := routeStats(t, admin)
		var out []routeCount
		for _, c := range want {
			out = append(out, routeCount{c.prefix, stats[plan.MeshRouteMetric(vhost, c.prefix, "upstream_rq_time")],
				stats[plan.MeshRouteMetric(vhost, c.prefix, "upstream_rq_total")], stats[plan.MeshRouteMetric(vhost, c.prefix, "upstream_rq_retry")]})
		}
		return out
	}
	// Histograms reach the stats output at Envoy's stats flush (5 s).
	harness.Eventually(t, 15*time.Second, "every route's latency histogram flushed", func() (bool, string) {
		g := got()
		return g[0].answered+g[1].answered+g[2].answered >= 150, fmt.Sprint(g)
	})
	for i, c := range got() {
		w := want[i]
		t.Logf("route stats %s: %v answered, %v attempts, %v retries", c.prefix, c.answered, c.sent, c.hedged)
		if c != w {
			t.Errorf("route stats %s: %v answered, %v attempts, %v retries; want %v, %v, %v",
				c.prefix, c.answered, c.sent, c.hedged, w.answered, w.sent, w.hedged)
		}
	}

	// The chart's dashboards show the policy from the sidecar's metrics
	// (#24): every panel that reads the data plane.
	checkMeshDashboards(t, prom, listenPort, host, port, slow, fast)

	// The hedge account. istiod puts the namespace's account filter (the
	// Proxy-Wasm module, inlined) before the router of the sidecar's
	// listeners. Upstream Envoy cannot take istiod's listeners (they carry
	// Istio-only filters), so more Envoys run that filter, as istiod rendered
	// it, before their router, with istiod's routes. Half the requests meet
	// the slow replica: unbounded, half would be hedged (the first Envoy
	// above); the account holds hedges to the budget, 5% of the requests.
	var rendered *hcmv3.HttpFilter
	listener := fmt.Sprintf("0.0.0.0_%d", port)
	harness.Eventually(t, 30*time.Second, "the hedge account before the router in istiod's listener "+listener, func() (bool, string) {
		filters, listeners, err := listenerHTTPFilters(grpcPort, listener)
		if err != nil {
			return false, err.Error()
		}
		names := filterNames(filters)
		i, r := slices.Index(names, envoyconf.HedgeBudgetFilter), slices.Index(names, "envoy.filters.http.router")
		if i >= 0 {
			rendered = filters[i]
		}
		return i >= 0 && i < r, fmt.Sprintf("HTTP filters %v; listeners %v", names, listeners)
	})
	filterJSON, err := protojson.Marshal(rendered)
	if err != nil {
		t.Fatal(err)
	}
	envoys := 0
	// sidecar starts an Envoy with the account filter and returns its port
	// once it routes the Service, and the probes that took.
	sidecar := func(name string, replicas ...*replica) (int, int) {
		envoys++
		listenPort := harness.Port(t)
		boot := filepath.Join(dir, name+".yaml")
		var ports []int
		for _, r := range replicas {
			ports = append(ports, r.port())
		}
		if err := os.WriteFile(boot, []byte(sidecarBootstrap(listenPort, grpcPort, strconv.Itoa(port), cluster, []string{string(filterJSON)}, ports...)), 0o600); err != nil {
			t.Fatal(err)
		}
		harness.RunProcess(t, name, dir, nil, envoy, "-c", boot, "--concurrency", "1", "--base-id", strconv.Itoa(os.Getpid()%50000+8+envoys), "-l", "warning")
		probes := 0
		harness.Eventually(t, 30*time.Second, name+" to route the Service", func() (bool, string) {
			probes++
			_, _, codes := sendTo(listenPort, host, port, http.MethodGet, 1, 1)
			return codes[http.StatusOK] == 1, fmt.Sprint(codes)
		})
		return listenPort, probes
	}
	listenPort2, probes := sidecar("envoy-account", slow, fast)
	const accountRequests = 400
	_, att, _ = measureAt(t, "hedged, with the hedge account", listenPort2, host, port, http.MethodGet, accountRequests, 8, slow, fast)
	hedges, most := att["fast GET/2"]+att["slow GET/2"], int(0.05*float64(accountRequests+probes))
	t.Logf("hedge account: %d hedges for %d requests (%d probes), at most %d (5%%)", hedges, accountRequests, probes, most)
	if hedges > most || hedges < most/2 {
		t.Errorf("the hedge account sent %d hedges for %d requests, half of them slow; want the budget's share: %d..%d", hedges, accountRequests+probes, most/2, most)
	}

	// A sidecar trusts its app's Envoy headers (#23, defect 7). With them, a
	// request the account let through unchanged went out with 11 attempts,
	// 1 ms apart, none of them charged. The account now sets or removes
	// them on every request of its routes: at most 1 + maxHedges attempts.
	slow.reset()
	fast.reset()
	hostile := map[string]string{
		"x-envoy-max-retries": "10", "x-envoy-upstream-rq-per-try-timeout-ms": "1",
		"x-envoy-retry-on": "5xx,reset,retriable-4xx", "x-envoy-hedge-on-per-try-timeout": "true",
	}
	// The attempt count stays inside on the account's routes and on the
	// bypass route (#23, defect 11): only requests ask for it.
	leaked := 0
	for i := range 50 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item/%d", listenPort2, i), nil)
		req.Host = fmt.Sprintf("%s:%d", host, port)
		if i >= 40 {
			req.Header.Set(plan.BypassHeader, "1")
		}
		for k, v := range hostile {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("x-envoy-attempt-count") != "" {
			leaked++
		}
	}
	time.Sleep(300 * time.Millisecond) // cancelled attempts end
	sa, _ = slow.counts()
	fa, _ = fast.counts()
	t.Logf("50 GETs with a client's retry headers, the last 10 with the bypass header: slow replica attempts %v; fast replica attempts %v", sa, fa)
	for _, counts := range []map[string]int{sa, fa} {
		for k, n := range counts {
			if k != "GET/1" && k != "GET/2" {
				t.Errorf("%d attempts %s: a client's headers bought attempts beyond 1 + maxHedges", n, k)
			}
		}
	}
	if leaked > 0 {
		t.Errorf("%d of 50 responses carried x-envoy-attempt-count to the client", leaked)
	}

	// A replica restarts at a low rate: the account fits few hedges, and the
	// requests it cannot hedge keep the mesh's failure retries. With the
	// previous filter (x-envoy-max-retries: 0 for them) and patch (retries on
	// reset,connect-failure only, once), they failed.
	withCodes := duringRestart(t, listenPort2, host, port, fast)
	t.Logf("60 GETs at 20/s while a replica restarts, with tailcut's patch and filter: statuses %v (istiod's routes alone: %v)", withCodes, meshCodes)
	if withCodes[http.StatusOK] < meshCodes[http.StatusOK] {
		t.Errorf("across a replica's restart: %v with tailcut's filter, %v with the mesh's routes alone; want as many answered as the mesh's own retries answer", withCodes, meshCodes)
	}

	// Callers with deadlines of their own reset requests (#23, defect 2): a
	// fresh sidecar, and one more, each for 20 s at 50 GETs a second, the
	// second with one request in 25 reset by its client 5 ms in, long
	// before the hedge (20 ms). The account gives a cancelled request's
	// unsent hedge back when its stream ends; the Lua account could not see
	// that end, and a cancelled request kept its hedge for the account's
	// whole history.
	polite := hedgesWithCancellations(t, sidecar, "envoy-polite", host, port, fast, 0)
	cancelling := hedgesWithCancellations(t, sidecar, "envoy-cancelling", host, port, fast, 25)
	t.Logf("the account on a sidecar: %d hedges without cancellations, %d with 4%% of requests cancelled", polite, cancelling)
	if float64(cancelling) < 0.95*float64(polite) {
		t.Errorf("with cancellations the account sent %d hedges, without %d: want at least 95%%", cancelling, polite)
	}

	rp.Hedge.Delay = 35 * time.Millisecond
	if err := pub.Publish(ctx, ownerOf(policy), rp); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the new delay in Envoy's route", hedged("0.035s"))

	// Affinity (#27): the filter merges the ring hash into the Service's
	// cluster as istiod renders it (asked of istiod: this test's sidecar
	// keeps a static cluster of the replicas), and the key's hash policy into
	// the sidecar's routes. The routes still hedge: every first attempt at
	// the slow replica is hedged to the fast one, none the other way. Where
	// each key goes is TestHedgesGoToTheKeysNextOwner's (controllers/xds).
	rp.Affinity = &plan.Affinity{HashOn: plan.HashOnHeader, Name: "x-cache-key", LoadBalancer: plan.LoadBalancerRingHash, RingSize: 1024}
	if err := pub.Publish(ctx, ownerOf(policy), rp); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the ring hash on istiod's "+cluster, func() (bool, string) {
		c, err := istiodCluster(grpcPort, cluster)
		switch {
		case err != nil:
			return false, err.Error()
		case c == nil:
			return false, "no cluster " + cluster
		}
		return c.GetLbPolicy() == clusterv3.Cluster_RING_HASH && c.GetRingHashLbConfig().GetMinimumRingSize().GetValue() == 1024, compact(c)
	})
	harness.Eventually(t, 30*time.Second, "the key's hash policy on every route", func() (bool, string) {
		v, rs := routes()
		hashed := 0
		for _, r := range rs {
			if strings.Contains(compact(r), `"hash_policy":[{"header":{"header_name":"x-cache-key"}}]`) {
				hashed++
			}
		}
		return len(rs) >= 3 && hashed == len(rs), fmt.Sprintf("version %s: %d of %d routes hash: %s", v, hashed, len(rs), compact(rs))
	})
	slow.reset()
	fast.reset()
	var slowest time.Duration
	failed := 0
	for k := range 40 {
		for range 2 {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item", listenPort), nil)
			req.Host = fmt.Sprintf("%s:%d", host, port)
			req.Header.Set("x-cache-key", fmt.Sprintf("key-%d", k))
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			slowest = max(slowest, time.Since(start))
			if resp.StatusCode != http.StatusOK {
				failed++
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // the slow replica's cancelled attempts end
	sa, _ = slow.counts()
	fa, _ = fast.counts()
	t.Logf("80 GETs of 40 keys with affinity: slowest %s; slow replica attempts %v, fast replica attempts %v", slowest.Round(time.Millisecond), sa, fa)
	if sa["GET/1"] == 0 || sa["GET/2"] != 0 || fa["GET/2"] != sa["GET/1"] || slowest >= 150*time.Millisecond || failed > 0 {
		t.Errorf("with affinity: slow replica %v, fast replica %v, slowest GET %s, %d failed; want each first attempt at the slow replica hedged to the fast one, none the other way", sa, fa, slowest, failed)
	}

	if err := pub.Remove(ctx, client.ObjectKeyFromObject(policy)); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "istiod's own route back in Envoy", func() (bool, string) {
		v, rs := routes()
		s := compact(rs)
		return len(rs) > 0 && !strings.Contains(s, "hedge_policy") && !strings.Contains(s, UnhedgedRouteName) && !strings.Contains(s, BypassRouteName(rp.Name)), "version " + v + ": " + s
	})
	harness.Eventually(t, 30*time.Second, "the hedge account gone from istiod's listener "+listener, func() (bool, string) {
		filters, _, err := listenerHTTPFilters(grpcPort, listener)
		if err != nil {
			return false, err.Error()
		}
		names := filterNames(filters)
		return len(names) > 0 && !slices.Contains(names, envoyconf.HedgeBudgetFilter), fmt.Sprintf("HTTP filters %v", names)
	})
}

// hedgesWithCancellations starts a sidecar with the account, to the fast
// replica alone, and sends it 50 GETs a second for 20 s, within one of the
// account's windows. One request in 25 is slow (slowPathDelay): fewer than
// the 5% budget can hedge, so the account should hedge each. When
// cancelEvery is not 0, every cancelEvery-th request besides is a slow one
// that its client resets after 5 ms, long before its hedge (20 ms). It
// returns the hedges the replica saw, and checks them against the budget: at
// most 5% of the requests, cancelled ones included (they arrived).
func hedgesWithCancellations(t *testing.T, sidecar func(string, ...*replica) (int, int), name, host string, port int, fast *replica, cancelEvery int) int {
	t.Helper()
	const rate, length, slowEvery, cancelAfter = 50, 20 * time.Second, 25, 5 * time.Millisecond
	listenPort, probes := sidecar(name, fast)
	fast.reset()
	patient := &http.Client{Timeout: 5 * time.Second}
	impatient := &http.Client{Timeout: cancelAfter}
	var (
		mu                            sync.Mutex
		slowSent, answered, cancelled int
		wg                            sync.WaitGroup
	)
	n := int(rate * length / time.Second)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		cl, path := patient, fmt.Sprintf("/item/%s-%d", name, i)
		switch {
		case cancelEvery > 0 && i%cancelEvery == cancelEvery/2:
			cl, path = impatient, fmt.Sprintf("/item/slow-cancelled-%s-%d", name, i)
		case i%slowEvery == 0:
			path = fmt.Sprintf("/item/slow-%s-%d", name, i)
			slowSent++
		}
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", listenPort, path), nil)
			req.Host = fmt.Sprintf("%s:%d", host, port)
			resp, err := cl.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if cl == impatient {
					cancelled++
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				answered++
			}
		})
	}
	wg.Wait()
	time.Sleep(slowPathDelay) // the last hedges arrive
	attempts, _ := fast.counts()
	hedges := attempts["GET/2"]
	all := n + probes
	most := int(0.05 * float64(all))
	t.Logf("%s: %d GETs (%d probes), %d slow, %d answered, %d cancelled after %s: %d hedges, at most %d (5%%); attempts %v",
		name, all, probes, slowSent, answered, cancelled, cancelAfter, hedges, most, attempts)
	if cancelEvery > 0 && cancelled != n/cancelEvery {
		t.Errorf("%s: %d requests were cancelled; want the %d sent to be", name, cancelled, n/cancelEvery)
	}
	if answered+cancelled != n {
		t.Errorf("%s: %d answered and %d cancelled of %d", name, answered, cancelled, n)
	}
	if hedges > most {
		t.Errorf("%s: %d hedges for %d requests, over the 5%% budget (%d)", name, hedges, all, most)
	}
	// The slow requests are fewer than the budget: the account hedges each,
	// but for what the first seconds of a window round down.
	if least := min(most, slowSent) - 5; hedges < least {
		t.Errorf("%s: %d hedges for %d slow requests, want at least %d: a cancelled request's unsent hedge must come back to the account", name, hedges, slowSent, least)
	}
	if attempts["GET/3"] > 0 {
		t.Errorf("%s: %d third attempts; maxHedges is 1", name, attempts["GET/3"])
	}
	return hedges
}

// routeStats reads Envoy's Prometheus stats and returns the value of each
// counter, and the sample count of each histogram, by name.
func routeStats(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("Envoy's /stats/prometheus: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[name] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
