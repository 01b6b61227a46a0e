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

// Command tailcut runs the tailcut operator: the HedgePolicy controller, the
// Prometheus delay estimator and the xDS server that serves hedge settings to
// Envoy. `tailcut bootstrap` prints an Envoy bootstrap that points at it;
// `tailcut verify` runs an A/B on a Service and judges it (controllers/verify).
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/gateway"
	"github.com/tailcut/tailcut/controllers/istio"
	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/controllers/replicas"
	"github.com/tailcut/tailcut/controllers/target"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/controllers/xds"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(tailcutv1alpha1.AddToScheme(scheme))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "verify" {
		os.Exit(verify.Command(ctrl.SetupSignalHandler(), os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "bootstrap" {
		if err := envoyconf.BootstrapCommand(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "tailcut bootstrap:", err)
			os.Exit(2)
		}
		return
	}
	var (
		metricsAddr, probeAddr string
		pprofAddr              string
		leaderElect            bool
		leaderElectionNS       string
		leaseDuration          time.Duration
		renewDeadline          time.Duration
		retryPeriod            time.Duration
		xdsAddr, promURL       string
		listenerAddr           string
		listenerPort           int
		hedgeAccountModule     string
		hostsFile              string
		promTimeout            time.Duration
		pushDebounce           time.Duration
		retireAfter            time.Duration
		metricsSecure          bool
		metricsCertDir         string
		istioOn                bool
		envoyGatewayOn         bool
		envoyGatewayModule     string
		istioAccountModule     string
		xdsTLS                 envoyconf.TLSFiles
		kubeQPS                float64
		kubeBurst              int
		replicaName, replicaNS string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to. Use 0 to disable it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address that serves Go's pprof profiles (/debug/pprof/), for diagnosis. Empty disables it.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles and writes status.")
	flag.StringVar(&leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's namespace).")
	flag.DurationVar(&leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long the other replicas wait after the leader's last renewal before one takes the lease: the take-over time when the leader dies without stopping (a leader that stops hands the lease over at once).")
	flag.DurationVar(&renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew the lease before it stops leading and exits. Below --leader-election-lease-duration.")
	flag.DurationVar(&retryPeriod, "leader-election-retry-period", 2*time.Second, "How often the replicas try to take or renew the lease. Below --leader-election-renew-deadline / 1.2.")
	flag.StringVar(&xdsAddr, "xds-address", xds.DefaultXDSAddress, "Address the xDS (ADS gRPC) server listens on. Empty disables the XDS publisher.")
	flag.StringVar(&xdsTLS.CertFile, "xds-tls-cert", "", "The xDS server's certificate (PEM). With --xds-tls-key and --xds-tls-client-ca, xDS is served over mutual TLS: only proxies with a certificate the client CA signed can connect, and count in status.")
	flag.StringVar(&xdsTLS.KeyFile, "xds-tls-key", "", "The key of --xds-tls-cert.")
	flag.StringVar(&xdsTLS.CAFile, "xds-tls-client-ca", "", "The CA (PEM) that signs the proxies' client certificates.")
	flag.DurationVar(&retireAfter, "xds-retire-after", 10*time.Minute, "How long tailcut's Envoy keeps routing a Service, unhedged, after its policy is deleted or its target Service port disappears, before it answers 404. 0 removes the route at once.")
	flag.DurationVar(&pushDebounce, "xds-push-debounce", 100*time.Millisecond, "Batch xDS pushes: push once changes pause this long (at most 1s after the first). 0 pushes every change at once.")
	flag.StringVar(&listenerAddr, "envoy-listener-address", "0.0.0.0", "Address of the HTTP listener tailcut programs into Envoy.")
	flag.IntVar(&listenerPort, "envoy-listener-port", 10000, "Port of the HTTP listener tailcut programs into Envoy.")
	flag.StringVar(&hedgeAccountModule, "envoy-hedge-account-module", envoyconf.DefaultHedgeAccountModule, "Path, on the proxies, of the hedge account's Proxy-Wasm module (tailcut bootstrap --hedge-account-module puts it there). A proxy that cannot load it rejects the listener, and policies say so (NACK).")
	flag.StringVar(&hostsFile, "hosts-file", "", "A hosts(5) file that resolves FQDN EndpointSlice addresses before DNS (for local stacks).")
	flag.StringVar(&istioAccountModule, "istio-hedge-account-module", "/hedge-account.wasm", "With --istio, the hedge account's Proxy-Wasm module, which the operator inlines in one EnvoyFilter per namespace with Istio policies (the operator image has it at this path).")
	flag.BoolVar(&envoyGatewayOn, "envoy-gateway", false, "Publish the policies whose publish.target is EnvoyGateway as EnvoyPatchPolicies on the Envoy Gateway Gateways whose HTTPRoutes send to their Service. Needs Gateway API and Envoy Gateway's CRDs, enableEnvoyPatchPolicy in Envoy Gateway's config, and the rights the chart grants with envoyGateway.enabled.")
	flag.StringVar(&envoyGatewayModule, "envoy-gateway-hedge-account-module", "/hedge-account.wasm", "With --envoy-gateway, the hedge account's Proxy-Wasm module, which the operator inlines in one EnvoyPatchPolicy per patched Gateway (the operator image has it at this path).")
	flag.BoolVar(&istioOn, "istio", false, "Publish the policies whose publish.target is Istio as Istio EnvoyFilters. Needs Istio's CRDs and the EnvoyFilter rights the chart grants with istio.enabled.")
	flag.StringVar(&promURL, "prometheus-url", "", "Prometheus base URL for Auto delays, e.g. http://prometheus:9090. Empty: Auto policies use their fallback.")
	flag.DurationVar(&promTimeout, "prometheus-timeout", estimate.DefaultQueryTimeout, "Timeout of each Prometheus query.")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the HTTPS metrics endpoint (the chart's <name>-metrics-tls Secret, whose ca.crt Prometheus checks); empty: a self-signed certificate generated at start.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, to clients whose token may get /metrics (a TokenReview and a SubjectAccessReview per scrape); false: plain HTTP to anyone who reaches the port.")
	flag.Float64Var(&kubeQPS, "kube-api-qps", 200, "Requests per second to the Kubernetes API server (status writes, mostly: about two per policy when they all start).")
	flag.IntVar(&kubeBurst, "kube-api-burst", 400, "Burst of requests to the Kubernetes API server above --kube-api-qps.")
	flag.StringVar(&replicaName, "replica-name", os.Getenv("POD_NAME"), "This replica's name, unique among replicas (default: $POD_NAME, else the host name).")
	flag.StringVar(&replicaNS, "replica-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the replicas' proxy reports, so that status counts the proxies of every replica (default: $POD_NAMESPACE). Empty: only the leader's proxies are counted.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if replicaName == "" {
		replicaName, _ = os.Hostname()
	}
	if err := checkLeaderElectionTimes(leaseDuration, renewDeadline, retryPeriod); err != nil {
		log.Error(err, "invalid leader election flags")
		os.Exit(1)
	}
	var cacheOpts cache.Options
	if replicaNS != "" {
		// Only the replicas' reports: the operator reads no other ConfigMap.
		cacheOpts.ByObject = map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
			Namespaces: map[string]cache.Config{replicaNS: {}},
			Label:      replicas.ReportSelector(),
		}}
	}

	shutdownTimeout := 7 * time.Second
	restConfig := ctrl.GetConfigOrDie()
	restConfig.QPS, restConfig.Burst = float32(kubeQPS), kubeBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOptions(metricsAddr, metricsSecure, metricsCertDir),
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "tailcut.tailcut.io",
		LeaderElectionNamespace: leaderElectionNS,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		// A replica that is stopped (deleted, evicted, rolled) gives the
		// lease up, so the next leader takes over at its next try (a
		// retry period, jittered) instead of waiting out the lease. Safe because main returns as soon
		// as the manager has stopped.
		LeaderElectionReleaseOnCancel: true,
		// Stop, and so give the lease up, before the kubelet's SIGKILL (the
		// chart's terminationGracePeriodSeconds is 10).
		GracefulShutdownTimeout: &shutdownTimeout,
	})
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}

	var estimator estimate.Estimator = estimate.StaticOnly{}
	var evaluations []<-chan event.GenericEvent
	if promURL != "" {
		p, err := estimate.NewPrometheus(estimate.PrometheusOptions{Address: promURL, Timeout: promTimeout})
		if err != nil {
			log.Error(err, "invalid --prometheus-url")
			os.Exit(1)
		}
		// The sampler reads Prometheus on its own schedule; reconciles read
		// only what it read, and never wait for Prometheus.
		sampled := make(chan event.GenericEvent, 1024)
		list := func(ctx context.Context) ([]tailcutv1alpha1.HedgePolicy, error) {
			var l tailcutv1alpha1.HedgePolicyList
			err := mgr.GetClient().List(ctx, &l)
			return l.Items, err
		}
		if err := mgr.Add(p.Sampler(list, sampled, ctrl.Log.WithName("sampler"))); err != nil {
			log.Error(err, "unable to add the Prometheus sampler")
			os.Exit(1)
		}
		estimator = p
		evaluations = append(evaluations, sampled)
	}
	aliases, err := controllers.ReadHostsFile(hostsFile)
	if err != nil {
		log.Error(err, "invalid --hosts-file")
		os.Exit(1)
	}
	reconciler := &controllers.HedgePolicyReconciler{
		HostAliases: aliases,
		Evaluations: evaluations,
		Client:      mgr.GetClient(),
		Recorder:    mgr.GetEventRecorder("tailcut"),
		Estimator:   estimator,
		Publishers:  map[tailcutv1alpha1.PublishTarget]publish.Publisher{},
	}
	var srv *xds.Server
	if xdsAddr != "" {
		var serverTLS *tls.Config
		if xdsTLS.Enabled() {
			if serverTLS, err = xds.ServerTLS(xdsTLS); err != nil {
				log.Error(err, "invalid xDS TLS flags")
				os.Exit(1)
			}
		}
		srv = xds.NewServer(xds.ServerOptions{
			TLS:       serverTLS,
			Address:   xdsAddr,
			Translate: envoyconf.TranslateOptions{ListenerAddress: listenerAddr, ListenerPort: uint32(listenerPort), HedgeAccountModule: hedgeAccountModule},
			Logger:    ctrl.Log.WithName("xds"),
			// A thousand policies applied at once are one push, not a thousand.
			PushDebounce: pushDebounce,
			RetireAfter:  retireAfter,
		})
		if _, err := srv.Listen(); err != nil {
			log.Error(err, "unable to listen for xDS", "address", xdsAddr)
			os.Exit(1)
		}
		if err := mgr.Add(srv); err != nil {
			log.Error(err, "unable to add the xDS server")
			os.Exit(1)
		}
		if err := mgr.Add(srv.InitialSync(mgr)); err != nil {
			log.Error(err, "unable to add the xDS initial sync")
			os.Exit(1)
		}
		reconciler.Publishers[tailcutv1alpha1.PublishXDS] = srv
		reconciler.Notifications = append(reconciler.Notifications, srv.Events())
		if err := mgr.AddReadyzCheck("xds", srv.ReadyzCheck); err != nil {
			log.Error(err, "unable to set up the xDS ready check")
			os.Exit(1)
		}
	}
	if srv != nil && replicaNS != "" {
		// Status counts the proxies of every replica: each reports its own,
		// the leader adds them up.
		ttl := 90 * time.Second
		reconciler.Publishers[tailcutv1alpha1.PublishXDS] = &replicas.Counting{
			Publisher: srv, Reader: mgr.GetCache(), Namespace: replicaNS, Replica: replicaName, TTL: ttl, Log: ctrl.Log.WithName("replicas"),
		}
		watcher := &replicas.Watcher{Informers: mgr.GetCache(), Client: mgr.GetClient(), Namespace: replicaNS, Replica: replicaName, TTL: ttl, Log: ctrl.Log.WithName("replicas")}
		reconciler.Notifications = append(reconciler.Notifications, watcher.Events())
		reporter := &replicas.Reporter{Client: mgr.GetClient(), Namespace: replicaNS, Replica: replicaName, Source: srv, Owner: podOwner(replicaName), Log: ctrl.Log.WithName("replicas")}
		for _, r := range []manager.Runnable{watcher, reporter} {
			if err := mgr.Add(r); err != nil {
				log.Error(err, "unable to add the replicas' proxy reports")
				os.Exit(1)
			}
		}
	} else if srv != nil {
		log.Info("proxies connected to other replicas are not counted in status: set --replica-namespace (or POD_NAMESPACE) when running more than one replica")
	}
	if istioOn {
		if _, err := mgr.GetRESTMapper().RESTMapping(istio.EnvoyFilterGVK.GroupKind(), istio.EnvoyFilterGVK.Version); err != nil {
			log.Error(err, "--istio needs Istio's EnvoyFilter API (networking.istio.io/v1alpha3): install Istio, or run without --istio")
			os.Exit(1)
		}
		module, err := istio.LoadAccountModule(istioAccountModule)
		if err != nil {
			log.Error(err, "--istio needs the hedge account module (--istio-hedge-account-module)")
			os.Exit(1)
		}
		reconciler.Publishers[tailcutv1alpha1.PublishIstio] = &istio.Publisher{Client: mgr.GetClient(), Reader: mgr.GetCache(), AccountModule: module}
		reconciler.Owns = append(reconciler.Owns, istio.NewEnvoyFilter())
	}
	if envoyGatewayOn {
		if _, err := mgr.GetRESTMapper().RESTMapping(gateway.PatchPolicyGVK.GroupKind(), gateway.PatchPolicyGVK.Version); err != nil {
			log.Error(err, "--envoy-gateway needs Envoy Gateway's EnvoyPatchPolicy API (gateway.envoyproxy.io/v1alpha1): install Envoy Gateway, or run without --envoy-gateway")
			os.Exit(1)
		}
		module, err := istio.LoadAccountModule(envoyGatewayModule)
		if err != nil {
			log.Error(err, "--envoy-gateway needs the hedge account module (--envoy-gateway-hedge-account-module)")
			os.Exit(1)
		}
		reconciler.Publishers[tailcutv1alpha1.PublishEnvoyGateway] = &gateway.Publisher{Client: mgr.GetClient(), Reader: mgr.GetCache(), AccountModule: module}
		reconciler.Owns = append(reconciler.Owns, gateway.NewPatchPolicy())
	}
	if err := target.IndexPolicies(mgr); err != nil {
		log.Error(err, "unable to index HedgePolicies by target")
		os.Exit(1)
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		log.Error(err, "unable to set up the HedgePolicy controller")
		os.Exit(1)
	}
	if srv != nil {
		// Replicas that are not the leader serve the leader's decisions too.
		follower := &controllers.FollowerPublisher{Client: mgr.GetClient(), HostAliases: aliases, Publisher: srv, Elected: mgr.Elected()}
		if err := follower.SetupWithManager(mgr); err != nil {
			log.Error(err, "unable to set up the follower publisher")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up the ready check")
		os.Exit(1)
	}

	log.Info("starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "the manager stopped with an error")
		os.Exit(1)
	}
}

// checkLeaderElectionTimes refuses the combinations client-go's leader
// election would refuse only once the replica runs, with flag names.
func checkLeaderElectionTimes(lease, renew, retry time.Duration) error {
	switch {
	case retry <= 0:
		return fmt.Errorf("--leader-election-retry-period is %s, want above 0", retry)
	case renew <= time.Duration(1.2*float64(retry)):
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be above 1.2 x --leader-election-retry-period (%s)", renew, retry)
	case lease <= renew:
		return fmt.Errorf("--leader-election-lease-duration (%s) must be above --leader-election-renew-deadline (%s)", lease, renew)
	}
	return nil
}

// podOwner is this replica's Pod as the owner of its proxy report, when the
// Pod's UID is known (the chart sets POD_UID): the report goes with the Pod.
func podOwner(name string) *metav1.OwnerReference {
	uid := os.Getenv("POD_UID")
	if uid == "" || os.Getenv("POD_NAME") != name {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: k8stypes.UID(uid)}
}

// The operator's metrics, the kubebuilder v4 way: HTTPS, and only for
// clients whose token may get the /metrics URL (the chart's
// <name>-metrics-reader ClusterRole). The certificate is certDir's (the
// chart issues one whose CA Prometheus checks), or one controller-runtime
// generates. Its RBAC (TokenReviews, SubjectAccessReviews) is with the
// reconciler's.
func metricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	o := metricsserver.Options{
		BindAddress:   addr,
		SecureServing: secure,
		CertDir:       certDir,
		CertName:      "tls.crt",
		KeyName:       "tls.key",
		// No HTTP/2 (CVE-2023-44487).
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
