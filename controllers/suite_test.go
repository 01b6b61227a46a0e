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

package controllers

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/gateway"
	"github.com/tailcut/tailcut/controllers/istio"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/replicas"
	"github.com/tailcut/tailcut/controllers/target"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/harness"
)

// The operator's namespace in these tests, where replicas report their
// proxies, and how long a report counts without renewal.
const (
	reportNamespace = "tailcut-system"
	reportTTL       = 5 * time.Second
	// reconcileWorkers is the reconciler's worker count here, the default.
	reconcileWorkers = 8
)

var (
	cfg       *rest.Config
	testEnv   *envtest.Environment
	k8s       client.Client
	publisher = newRecordingPublisher()
	// reconciles can hold the reconciles as they begin.
	reconciles = &turnstile{}
	// sampled carries the sampler's evaluations; tests add their own.
	sampled = make(chan event.GenericEvent, 1024)
)

// TestMain runs one real API server and one manager with the reconciler for
// every test in this package, with Istio's and Envoy Gateway's CRDs installed.
// The XDS publisher is a recording stand-in (the real one is tested in its
// package); the Istio and Envoy Gateway publishers are the real ones, writing
// EnvoyFilters and EnvoyPatchPolicies to the API server.
func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	istioCRDs, err := envtestutil.IstioCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Envoy Gateway's CRDs come from the module that built the binary the
	// real Envoy Gateway test runs (ENVOY_GATEWAY_BIN, which make sets).
	eg := os.Getenv("ENVOY_GATEWAY_BIN")
	if eg == "" {
		fmt.Fprintln(os.Stderr, "ENVOY_GATEWAY_BIN is not set: run the tests with make, or export ENVOY_GATEWAY_BIN=$(hack/tools.sh envoy-gateway | tail -1)")
		os.Exit(1)
	}
	gatewayCRDs, err := envtestutil.EnvoyGatewayCRDs(eg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env, c, err := envtestutil.Start(append([]string{istioCRDs}, gatewayCRDs...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg, testEnv = c, env
	code := run(m)
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 envtestutil.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Custom queries go to the real Prometheus estimator, wired as main.go
	// wires it (with its sampler), and pointed at a Prometheus that accepts
	// queries and never answers them: an invalid template is refused before
	// any query, and nothing may wait for the queries that hang.
	hung := harness.NewFakePrometheus(func(string) harness.PromReply { return harness.PromReply{Hang: true} })
	defer hung.Close()
	prom, err := estimate.NewPrometheus(estimate.PrometheusOptions{Address: hung.URL, Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	list := func(ctx context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
		var l tailcutv1alpha1.HedgePolicyList
		err := mgr.GetClient().List(ctx, &l)
		return l.Items, err
	}
	if err := mgr.Add(prom.Sampler(list, sampled, ctrl.Log.WithName("sampler"))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The leader counts the proxies of other replicas from their reports,
	// as main.go wires it; a short TTL lets a test see a report expire.
	watcher := &replicas.Watcher{Informers: mgr.GetCache(), Client: mgr.GetClient(), Namespace: reportNamespace, Replica: "leader", TTL: reportTTL, Log: ctrl.Log.WithName("replicas")}
	if err := mgr.Add(watcher); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	counting := &replicas.Counting{Publisher: publisher, Reader: mgr.GetCache(), Namespace: reportNamespace, Replica: "leader", TTL: reportTTL, Log: ctrl.Log.WithName("replicas")}
	r := &HedgePolicyReconciler{
		Client:        turnstileClient{Client: mgr.GetClient(), turnstile: reconciles},
		Recorder:      mgr.GetEventRecorder("tailcut"),
		Notifications: []<-chan event.GenericEvent{watcher.Events(), publisher.events},
		Evaluations:   []<-chan event.GenericEvent{sampled},
		Estimator:     suiteEstimator{prom: prom},
		Publishers: map[tailcutv1alpha1.PublishTarget]publish.Publisher{
			tailcutv1alpha1.PublishXDS: counting,
			// The module's bytes matter to the proxies only: an empty
			// WebAssembly module's header stands for it here.
			tailcutv1alpha1.PublishIstio:        &istio.Publisher{Client: mgr.GetClient(), Reader: mgr.GetCache(), AccountModule: []byte("\x00asm\x01\x00\x00\x00")},
			tailcutv1alpha1.PublishEnvoyGateway: &gateway.Publisher{Client: mgr.GetClient(), Reader: mgr.GetCache(), AccountModule: []byte("\x00asm\x01\x00\x00\x00")},
		},
		Owns:                    []client.Object{istio.NewEnvoyFilter(), gateway.NewPatchPolicy()},
		MaxConcurrentReconciles: reconcileWorkers,
	}
	if err := target.IndexPolicies(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "cache did not sync")
		return 1
	}
	k8s = mgr.GetClient()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: reportNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// pauseAnnotation puts a policy in a designed pause, its value the reason.
const pauseAnnotation = "test.tailcut.dev/pause"

// suiteEstimator answers like an operator without --prometheus-url, except
// for Custom queries, which the Prometheus estimator checks, and policies
// annotated pauseAnnotation.
type suiteEstimator struct{ prom *estimate.Prometheus }

func (e suiteEstimator) Estimate(ctx context.Context, p *tailcutv1alpha1.HedgePolicy, now time.Time) (estimate.Result, error) {
	if a := p.Spec.Delay.Auto; a != nil && a.Source == tailcutv1alpha1.EstimateSourceCustom {
		return e.prom.Estimate(ctx, p, now)
	}
	if reason := p.Annotations[pauseAnnotation]; reason != "" {
		// What the Prometheus estimator decides in a designed pause
		// (estimate's decide; tested there).
		return estimate.Result{Source: tailcutv1alpha1.DelaySourceNone, Derived: true, DerivedReason: reason,
			Reason: "hedging paused (" + reason + "): set by the test"}, nil
	}
	return estimate.StaticOnly{}.Estimate(ctx, p, now)
}

// recordingPublisher remembers what the reconciler published and answers Status
// with what a test set.
type recordingPublisher struct {
	mu        sync.Mutex
	published map[types.NamespacedName]plan.RoutePlan
	calls     map[types.NamespacedName]int // Publish calls
	removed   map[types.NamespacedName]int
	retired   map[types.NamespacedName]int
	status    map[types.NamespacedName]publish.ProgramStatus
	// events wakes the reconciler, as the xDS server does on an ACK.
	events chan event.GenericEvent
	// gate, while set, holds every Publish until it is closed; a send on it
	// lets one go.
	gate chan struct{}
	// held counts the Publish calls waiting at the gate, by policy.
	held map[types.NamespacedName]int
}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{
		published: map[types.NamespacedName]plan.RoutePlan{},
		calls:     map[types.NamespacedName]int{},
		removed:   map[types.NamespacedName]int{},
		retired:   map[types.NamespacedName]int{},
		status:    map[types.NamespacedName]publish.ProgramStatus{},
		events:    make(chan event.GenericEvent, 16),
		held:      map[types.NamespacedName]int{},
	}
}

// answer sets what the proxies report for the policy and wakes the
// reconciler, as an ACK or a NACK would.
func (p *recordingPublisher) answer(key types.NamespacedName, s publish.ProgramStatus) {
	p.setStatus(key, s)
	p.notify(key)
}

// notify wakes the reconciler for the policy, as a proxy's ACK would.
func (p *recordingPublisher) notify(key types.NamespacedName) {
	p.events <- event.GenericEvent{Object: &tailcutv1alpha1.HedgePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
}

func (p *recordingPublisher) Publish(_ context.Context, owner publish.Owner, rp plan.RoutePlan) error {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		key := owner.KeyOf(rp)
		p.mu.Lock()
		p.held[key]++
		p.mu.Unlock()
		<-gate
		p.mu.Lock()
		if p.held[key]--; p.held[key] == 0 {
			delete(p.held, key)
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published[owner.KeyOf(rp)] = rp
	p.calls[owner.KeyOf(rp)]++
	return nil
}

// waiting is the number of Publish calls held at the gate.
func (p *recordingPublisher) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.held {
		n += c
	}
	return n
}

// heldAtGate says whether a Publish of the policy waits at the gate.
func (p *recordingPublisher) heldAtGate(key types.NamespacedName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[key] > 0
}

func (p *recordingPublisher) publishes(key types.NamespacedName) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

func (p *recordingPublisher) Remove(_ context.Context, key types.NamespacedName) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.published, key)
	p.removed[key]++
	return nil
}

// Retire keeps the plan, unhedged, as the xDS server does.
func (p *recordingPublisher) Retire(_ context.Context, key types.NamespacedName) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired[key]++
	if rp, ok := p.published[key]; ok {
		rp.Hedge = nil
		p.published[key] = rp
	}
	return nil
}

func (p *recordingPublisher) retirements(key types.NamespacedName) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retired[key]
}

func (p *recordingPublisher) Status(key types.NamespacedName) publish.ProgramStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status[key]
}

func (p *recordingPublisher) setStatus(key types.NamespacedName, s publish.ProgramStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status[key] = s
}

func (p *recordingPublisher) plan(key types.NamespacedName) (plan.RoutePlan, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rp, ok := p.published[key]
	return rp, ok
}

func (p *recordingPublisher) removals(key types.NamespacedName) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removed[key]
}

// turnstileClient is the reconciler's client. A reconcile's first call is
// the Get of its policy, which the turnstile may hold.
type turnstileClient struct {
	client.Client
	turnstile *turnstile
}

func (c turnstileClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*tailcutv1alpha1.HedgePolicy); ok {
		c.turnstile.pass(key)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// turnstile, while closed, holds every reconcile as it begins and lists the
// policies held, in order.
type turnstile struct {
	mu     sync.Mutex
	closed chan struct{} // nil while open
	held   []types.NamespacedName
}

func (ts *turnstile) pass(key types.NamespacedName) {
	ts.mu.Lock()
	closed := ts.closed
	if closed != nil {
		ts.held = append(ts.held, key)
	}
	ts.mu.Unlock()
	if closed != nil {
		<-closed
	}
}

// close holds the reconciles that begin from now on.
func (ts *turnstile) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed == nil {
		ts.closed, ts.held = make(chan struct{}), nil
	}
}

// holding is the policies held so far, in the order their reconciles began.
func (ts *turnstile) holding() []types.NamespacedName {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.held)
}

// open lets the held reconciles go on, and every later one pass.
func (ts *turnstile) open() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed != nil {
		close(ts.closed)
		ts.closed = nil
	}
}

// queueDepth is how many requests the reconciler's work queue (named
// hedgepolicy in SetupWithManager) holds ready, by priority:
// controller-runtime's workqueue_depth gauge, which counts neither the
// requests being reconciled nor those waiting out a RequeueAfter.
func queueDepth(t *testing.T) map[int]int {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	depth := map[int]int{}
	for _, mf := range mfs {
		if mf.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if p, err := strconv.Atoi(labels["priority"]); err == nil && labels["name"] == "hedgepolicy" {
				depth[p] += int(m.GetGauge().GetValue())
			}
		}
	}
	return depth
}

// eventually waits, a generous 20 s, until cond returns nil.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, what, func() (bool, string) {
		err := cond()
		return err == nil, fmt.Sprint(err)
	})
}
