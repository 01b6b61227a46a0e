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

// Package localstack runs tailcut's whole data path on one machine: a real etcd and
// kube-apiserver (envtest), the operator binary, three workload replicas behind a
// Service, a real Envoy bootstrapped from the operator, a real Prometheus scraping
// all of them, and measures with tailcut verify's A/B. `make demo` and `make test-e2e`
// drive it.
package localstack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// Namespace and Service the stack creates for the workload.
const (
	Namespace = "demo"
	Service   = "workload"
	Port      = 80
)

// Ports are the loopback ports the stack listens on.
type Ports struct {
	Listener, Admin, XDS, Prometheus, Metrics, Probe int
	Workloads                                        [3]int
}

// DefaultPorts start at 19000.
func DefaultPorts() Ports {
	return Ports{Listener: 19000, Admin: 19001, XDS: 19002, Prometheus: 19090, Metrics: 19080, Probe: 19081, Workloads: [3]int{19101, 19102, 19103}}
}

// ReservePorts reserves every port of a stack with test/harness, for a
// stack that runs beside a demo or another test: no other stack or test
// server gets one of them while this process runs.
func ReservePorts() (Ports, error) {
	var p Ports
	for _, port := range []*int{&p.Listener, &p.Admin, &p.XDS, &p.Prometheus, &p.Metrics, &p.Probe, &p.Workloads[0], &p.Workloads[1], &p.Workloads[2]} {
		var err error
		if *port, err = harness.ReservePort(); err != nil {
			return Ports{}, err
		}
	}
	return p, nil
}

// Options configure a stack.
type Options struct {
	Dir      string // working directory: logs, configs, Prometheus data
	Ports    Ports
	Scenario Scenario
	Log      func(format string, args ...any)
	// LeaderElect runs the operator with leader election and the replicas'
	// proxy reports, as the chart runs several replicas (StartReplica).
	LeaderElect bool
	// Fleet, when set, is the stack of the scale run (RunScale): instead of
	// the demo's workload replicas, their Service and a real Prometheus, many
	// Services whose endpoints nothing serves, and a fake Prometheus with
	// no data, which can hang (Stack.FakePrometheus).
	Fleet *Fleet
	// EnvoyConcurrency is Envoy's worker threads; 0 means 2.
	EnvoyConcurrency int
	// PprofAddress, when set, is where the operator serves pprof profiles.
	PprofAddress string
}

// Fleet is the scale run's targets: Services Services with an EndpointSlice
// each, spread over Namespaces namespaces.
type Fleet struct {
	Services, Namespaces int
}

// Stack is a running local stack.
type Stack struct {
	// operatorArgs, operatorEnv and prometheusArgs start those again after a
	// fault (chaos.go).
	operatorArgs, operatorEnv, prometheusArgs []string
	restarts                                  int
	opts                                      Options
	env                                       *envtest.Environment
	Client                                    client.Client
	procs                                     []*harness.Process
	bins                                      map[string]string
	// FakePrometheus is the Prometheus of a Fleet stack; nil otherwise.
	FakePrometheus *harness.FakePrometheus
}

// ToolEnv names the environment variables that carry the pinned tools' paths; the
// Makefile sets them from hack/tools.sh.
var ToolEnv = []string{"KUBEBUILDER_ASSETS", "ENVOY_BIN", "PROMETHEUS_BIN"}

// Start brings the stack up. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	s := &Stack{opts: opts, bins: map[string]string{}}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for _, v := range ToolEnv {
		if os.Getenv(v) == "" && (v != "PROMETHEUS_BIN" || opts.Fleet == nil) {
			return nil, fmt.Errorf("%s is not set: run through make (`make demo`, `make test`, `make bench-scale`), which installs the pinned tools", v)
		}
	}
	p := opts.Ports
	for what, port := range map[string]int{"Envoy listener": p.Listener, "Envoy admin": p.Admin, "xDS": p.XDS, "Prometheus": p.Prometheus,
		"operator metrics": p.Metrics, "operator probes": p.Probe, "workload 0": p.Workloads[0], "workload 1": p.Workloads[1], "workload 2": p.Workloads[2]} {
		if err := checkPortFree(what, addr(port)); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"logs", "bin", "prometheus"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.buildBinaries(ctx); err != nil {
		return nil, err
	}

	s.logf("starting etcd and kube-apiserver")
	// envtest logs through controller-runtime; the stack's own log is enough.
	ctrllog.SetLogger(logr.Discard())
	env, cfg, err := envtestutil.Start()
	if err != nil {
		return nil, err
	}
	s.env = env
	// A fleet's thousand objects are created in parallel.
	cfg.QPS, cfg.Burst = 2000, 4000
	if s.Client, err = client.New(cfg, client.Options{Scheme: envtestutil.Scheme()}); err != nil {
		return nil, err
	}
	kubeconfig, err := s.writeKubeconfig()
	if err != nil {
		return nil, err
	}

	if opts.Fleet != nil {
		if err := s.createFleet(ctx); err != nil {
			return nil, err
		}
		s.FakePrometheus = harness.NewFakePrometheus(nil)
	} else {
		if err := s.startWorkloads(ctx); err != nil {
			return nil, err
		}
		if err := s.createService(ctx); err != nil {
			return nil, err
		}
		if err := s.startPrometheus(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.startOperator(ctx, kubeconfig); err != nil {
		return nil, err
	}
	if err := s.startEnvoy(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) logf(format string, args ...any) {
	if s.opts.Log != nil {
		s.opts.Log(format, args...)
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func (s *Stack) dir(parts ...string) string {
	return filepath.Join(append([]string{s.opts.Dir}, parts...)...)
}

func (s *Stack) buildBinaries(ctx context.Context) error {
	pkgs := map[string]string{"tailcut": "."}
	if s.opts.Fleet == nil {
		pkgs["workload"] = "./test/workload"
	}
	s.logf("building %d programs", len(pkgs))
	for name, pkg := range pkgs {
		out := s.dir("bin", name)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = envtestutil.RepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		s.bins[name] = out
	}
	module, err := harness.BuildHedgeAccountModule(s.dir("bin"))
	if err != nil {
		return err
	}
	s.bins["hedge-account"] = module
	s.bins["envoy"], s.bins["prometheus"] = os.Getenv("ENVOY_BIN"), os.Getenv("PROMETHEUS_BIN")
	return nil
}

func (s *Stack) writeKubeconfig() (string, error) {
	path := s.dir("kubeconfig")
	return path, envtestutil.WriteKubeconfig(s.env, "tailcut-demo", path)
}

func (s *Stack) startWorkloads(ctx context.Context) error {
	s.logf("starting 3 workload replicas (%s)", s.opts.Scenario.Name)
	for i, port := range s.opts.Ports.Workloads {
		cfg, err := json.Marshal(s.opts.Scenario.ReplicaConfig(i))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("workload-%d", i)
		p, err := harness.StartProcess(name, s.dir("logs"), []string{"WORKLOAD_CONFIG=" + string(cfg)},
			s.bins["workload"], "--listen", addr(port), "--replica", name)
		if err != nil {
			return err
		}
		s.procs = append(s.procs, p)
		if err := waitHTTP(ctx, p, "http://"+addr(port)+"/healthz", 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// createService creates the Service and one EndpointSlice per replica: the
// replicas share the loopback address and differ by port, and an EndpointSlice
// has one port list for all its endpoints. The API server refuses loopback IPs
// in EndpointSlices, so each slice names a host (addressType FQDN) that the
// operator's --hosts-file maps to 127.0.0.1.
func (s *Stack) createService(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Service},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: Port}}},
		},
	}
	for i, port := range s.opts.Ports.Workloads {
		objs = append(objs, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: fmt.Sprintf("%s-%d", Service, i), Labels: map[string]string{discoveryv1.LabelServiceName: Service}},
			AddressType: discoveryv1.AddressTypeFQDN,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(port))}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{replicaHost(i)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		})
	}
	for _, o := range objs {
		if err := s.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func replicaHost(i int) string { return fmt.Sprintf("workload-%d.tailcut.local", i) }

func (s *Stack) startPrometheus(ctx context.Context) error {
	s.logf("starting Prometheus on %s", addr(s.opts.Ports.Prometheus))
	p := s.opts.Ports
	targets := func(ports ...int) string {
		out := ""
		for i, port := range ports {
			if i > 0 {
				out += ", "
			}
			out += strconv.Quote(addr(port))
		}
		return out
	}
	// The workload is not scraped: the estimator and every dashboard panel
	// must work for a backend that exports no metrics of its own (tailcut
	// verify reads the replicas' counters from them directly).
	cfg := fmt.Sprintf(`global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
- job_name: envoy
  metrics_path: /stats/prometheus
  static_configs: [{targets: [%s]}]
- job_name: tailcut
  static_configs: [{targets: [%s]}]
`, targets(p.Admin), targets(p.Metrics))
	path := s.dir("prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	s.prometheusArgs = []string{"--config.file=" + path, "--storage.tsdb.path=" + s.dir("prometheus"), "--web.listen-address=" + addr(p.Prometheus),
		"--storage.tsdb.retention.time=1d"}
	return s.runPrometheus(ctx, "prometheus")
}

func (s *Stack) runPrometheus(ctx context.Context, name string) error {
	proc, err := harness.StartProcess(name, s.dir("logs"), nil, s.bins["prometheus"], s.prometheusArgs...)
	if err != nil {
		return err
	}
	s.procs = append(s.procs, proc)
	return waitHTTP(ctx, proc, "http://"+addr(s.opts.Ports.Prometheus)+"/-/ready", 60*time.Second)
}

func (s *Stack) startOperator(ctx context.Context, kubeconfig string) error {
	p := s.opts.Ports
	s.logf("starting the tailcut operator (xDS on %s)", addr(p.XDS))
	hosts := ""
	for i := range p.Workloads {
		hosts += "127.0.0.1 " + replicaHost(i) + "\n"
	}
	if err := os.WriteFile(s.dir("hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	promURL := "http://" + addr(p.Prometheus)
	if s.FakePrometheus != nil {
		promURL = s.FakePrometheus.URL
	}
	s.operatorEnv = []string{"KUBECONFIG=" + kubeconfig}
	s.operatorArgs = []string{"--hosts-file=" + s.dir("hosts"),
		// The local Prometheus scrapes plain HTTP on loopback.
		"--metrics-bind-address=" + addr(p.Metrics), "--metrics-secure=false", "--health-probe-bind-address=" + addr(p.Probe),
		"--xds-address=" + addr(p.XDS), "--prometheus-url=" + promURL,
		"--envoy-listener-address=127.0.0.1", "--envoy-listener-port=" + strconv.Itoa(p.Listener),
		"--envoy-hedge-account-module=" + s.bins["hedge-account"], "--pprof-bind-address=" + s.opts.PprofAddress}
	if s.opts.LeaderElect {
		s.operatorArgs = append(s.operatorArgs, "--leader-elect", "--leader-election-namespace="+Namespace,
			"--replica-name=tailcut", "--replica-namespace="+Namespace)
	}
	return s.runOperator(ctx, "tailcut")
}

func (s *Stack) runOperator(ctx context.Context, name string) error {
	proc, err := harness.StartProcess(name, s.dir("logs"), s.operatorEnv, s.bins["tailcut"], s.operatorArgs...)
	if err != nil {
		return err
	}
	s.procs = append(s.procs, proc)
	// With a fleet of a thousand policies, the first full translation comes
	// before readiness.
	return waitHTTP(ctx, proc, "http://"+addr(s.opts.Ports.Probe)+"/readyz", 2*time.Minute)
}

func (s *Stack) startEnvoy(ctx context.Context) error {
	p := s.opts.Ports
	return s.runEnvoy(ctx, "envoy", p.XDS, p.Listener, p.Admin)
}

// runEnvoy starts an Envoy on the xDS server at xdsPort, with its admin
// interface on adminPort, and waits until it is ready.
func (s *Stack) runEnvoy(ctx context.Context, name string, xdsPort, listenerPort, adminPort int) error {
	s.logf("starting %s (xDS %s, listener %s, admin %s)", name, addr(xdsPort), addr(listenerPort), addr(adminPort))
	bootstrap, err := exec.CommandContext(ctx, s.bins["tailcut"], "bootstrap", "--xds-address="+addr(xdsPort),
		"--node-id="+name, "--admin-port="+strconv.Itoa(adminPort), "--listener-port="+strconv.Itoa(listenerPort)).Output()
	if err != nil {
		return fmt.Errorf("tailcut bootstrap: %w", err)
	}
	path := s.dir(name + ".yaml")
	if err := os.WriteFile(path, bootstrap, 0o644); err != nil {
		return err
	}
	concurrency := cmp.Or(s.opts.EnvoyConcurrency, 2)
	proc, err := harness.StartProcess(name, s.dir("logs"), nil, s.bins["envoy"], "-c", path, "--concurrency", strconv.Itoa(concurrency),
		"--base-id", strconv.Itoa(adminPort), "--log-level", "warn")
	if err != nil {
		return err
	}
	s.procs = append(s.procs, proc)
	return waitHTTP(ctx, proc, "http://"+addr(adminPort)+"/ready", 60*time.Second)
}

// Stop stops every process in reverse start order, then the API server.
func (s *Stack) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop(10 * time.Second)
	}
	s.procs = nil
	if s.FakePrometheus != nil {
		s.FakePrometheus.Close()
		s.FakePrometheus = nil
	}
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			s.logf("stopping the API server: %v", err)
		}
		s.env = nil
	}
}
