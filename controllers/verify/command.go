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

package verify

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Exit codes of `tailcut verify`.
const (
	ExitPass  = 0
	ExitFail  = 1 // the verdict failed, or the run was invalid
	ExitError = 2 // no verdict: bad flags, or a source that did not answer
)

// Command runs `tailcut verify` with args and returns its exit code.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, f, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitPass
	}
	if err != nil {
		fmt.Fprintln(stderr, "tailcut verify:", err)
		return ExitError
	}
	var kube client.Client
	var policy *tailcutv1alpha1.HedgePolicy
	if f.policy != "" {
		if kube, err = kubeClient(); err == nil {
			policy, err = fromPolicy(ctx, kube, f.policy, &o)
		}
		if err != nil {
			fmt.Fprintln(stderr, "tailcut verify:", err)
			return ExitError
		}
	}
	o.Log = stderr
	r, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "tailcut verify:", err)
		return ExitError
	}
	r.PrintTable(stdout)
	if f.json != "" {
		if err := writeJSON(r, f.json, stdout); err != nil {
			fmt.Fprintln(stderr, "tailcut verify:", err)
			return ExitError
		}
	}
	if f.record {
		if err := Record(ctx, kube, policy, r); err != nil {
			fmt.Fprintln(stderr, "tailcut verify: recording the result:", err)
			return ExitError
		}
		fmt.Fprintf(stdout, "recorded as an Event on hedgepolicy %s (kubectl describe hp -n %s %s)\n", f.policy, policy.Namespace, policy.Name)
	}
	if !r.Pass && !f.reportOnly {
		return ExitFail
	}
	return ExitPass
}

// CheckArgs parses and checks args as Command would, without sending or
// reading anything; what --policy would give stands in as placeholders. The
// chart's tests run it on the args of every Job that runs tailcut verify.
func CheckArgs(args []string) error {
	o, f, err := parse(args, io.Discard)
	if err != nil {
		return err
	}
	if f.policy != "" {
		if _, _, ok := strings.Cut(f.policy, "/"); !ok {
			return fmt.Errorf("--policy %q: want namespace/name", f.policy)
		}
		if o.Host == "" {
			o.Host = "service.namespace"
		}
		if o.HedgedCluster == "" {
			o.HedgedCluster, o.UnhedgedCluster = "hedged", "unhedged"
		}
	}
	return o.check()
}

// flags that are not Options.
type extraFlags struct {
	policy, json string
	record       bool
	reportOnly   bool
}

func parse(args []string, stderr io.Writer) (Options, extraFlags, error) {
	o := Options{Criteria: DefaultCriteria(), Limits: DefaultLimits()}
	var f extraFlags
	var direct, admins, workload, cluster string
	budget := -1.0
	var keys Keys
	fs := flag.NewFlagSet("tailcut verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: tailcut verify --url URL (--policy NS/NAME | --host HOST --budget-percent N) [flags]

An A/B run on a Service: the hedged route and an unhedged reference at the
same rate (independent random arrivals), through the same proxy to the same
pods. Prints a table
(and --json), exits 0 on PASS, 1 on FAIL (or an invalid run), 2 on an error.
The verdict checks every promise: the tail ratio, the extra load against the
policy's budget, no errors, a rate the generator kept, no duplicated POSTs.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.URL, "url", "", "The hedged route: the proxy's listener URL and path, e.g. http://tailcut-proxy.tailcut-system:10000/.")
	fs.StringVar(&o.Host, "host", "", "Host header naming the Service on the proxy (default with --policy: <service>.<namespace>).")
	fs.StringVar(&f.policy, "policy", "", "The HedgePolicy, namespace/name: gives the Host, the clusters and the budget, and where --record writes.")
	fs.BoolVar(&f.record, "record", false, "Write the result as an Event on the policy (kubectl describe hp shows it). Needs --policy.")
	fs.StringVar(&o.Unhedged, "unhedged", ArmBypass, "The reference arm: bypass (the proxy's unhedged route, header "+BypassHeader+": 1) or direct (--direct-urls).")
	fs.StringVar(&direct, "direct-urls", "", "Comma-separated base URLs of the Service's endpoints, for --unhedged=direct.")
	fs.IntVar(&o.Rate, "rate", 150, "Requests per second per arm.")
	fs.IntVar(&o.PostRate, "post-rate", 0, "POSTs per second on the hedged Host, which must never run twice (0: none).")
	fs.DurationVar(&o.Duration, "duration", time.Minute, "The measured phase. A p99 needs 10,000 samples per arm, a p99.9 100,000.")
	fs.DurationVar(&o.Settle, "settle", 0, "Both arms at --rate for this long first, not measured (errors and extra load still count).")
	fs.DurationVar(&o.WaitReady, "wait-ready", 2*time.Minute, "First wait this long at most for every route to answer below 400 three times in a row, each on a new connection (0: send at once).")
	fs.Float64Var(&o.Criteria.MaxP99Ratio, "max-p99-ratio", o.Criteria.MaxP99Ratio, "Pass when the hedged p99 is at most this times the unhedged p99.")
	fs.Float64Var(&budget, "budget-percent", budget, "The extra-load budget in percent (default with --policy: its budget.maxExtraLoadPercent).")
	fs.StringVar(&admins, "envoy-admin", "", "Comma-separated admin URLs of every proxy, e.g. http://127.0.0.1:9901: the extra load from their counters.")
	fs.StringVar(&o.PrometheusURL, "prometheus-url", "", "Prometheus that scrapes the proxies: the extra load from their counters (instead of --envoy-admin).")
	fs.StringVar(&cluster, "cluster", "", "The hedged cluster's name, for Envoy's counters (default with --policy: tailcut_<ns>_<service>_<port>).")
	fs.StringVar(&workload, "workload-metrics", "", "Comma-separated /metrics URLs of the replicas, where they export tailcut's workload counters.")
	fs.StringVar(&o.Scenario, "scenario", "", "Free text copied to the report.")
	fs.StringVar(&keys.Header, "key-header", "", "Give every GET a key in this header (a cache's clients), drawn from --keys keys with Zipf skew --zipf.")
	fs.IntVar(&keys.Count, "keys", 10000, "With --key-header: how many keys.")
	fs.Float64Var(&keys.Exponent, "zipf", DefaultZipfExponent, "With --key-header: the Zipf exponent, above 1 (key k is drawn in proportion to (1+k)^-zipf).")
	fs.BoolVar(&f.reportOnly, "report-only", false, "Send and report, but exit 0 whatever the verdict (2 still means no run): warm-up traffic, for instance.")
	fs.StringVar(&f.json, "json", "", "Write the JSON report to this file (- for standard output).")
	fs.IntVar(&o.Limits.Connections, "connections", o.Limits.Connections, "Idle keep-alive connections kept per host.")
	fs.IntVar(&o.Limits.MaxConnections, "max-connections", 0, "Most connections per host (0: no cap; a cap can make the run late).")
	fs.Uint64Var(&o.Limits.Workers, "workers", o.Limits.Workers, "Workers each stream starts with.")
	fs.Uint64Var(&o.Limits.MaxWorkers, "max-workers", 0, "Most workers per stream (0: no cap; a cap can make the run late).")
	fs.DurationVar(&o.Limits.Timeout, "timeout", o.Limits.Timeout, "A request slower than this fails.")
	fs.DurationVar(&o.Criteria.LateAfter, "late-after", o.Criteria.LateAfter, "A send this far behind its schedule is late.")
	fs.Float64Var(&o.Criteria.MaxLateFraction, "max-late-fraction", o.Criteria.MaxLateFraction, "The run is invalid when more than this share of a stream's requests is late.")
	if err := fs.Parse(args); err != nil {
		return o, f, err
	}
	if fs.NArg() > 0 {
		return o, f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.DirectURLs, o.EnvoyAdmin, o.WorkloadMetrics = list(direct), list(admins), list(workload)
	if keys.Header != "" {
		o.Keys = &keys
	}
	if cluster != "" {
		o.HedgedCluster, o.UnhedgedCluster = cluster, cluster+"_bypass"
	}
	if budget >= 0 {
		o.BudgetPct = &budget
	}
	if f.record && f.policy == "" {
		return o, f, errors.New("--record needs --policy")
	}
	if f.record && f.reportOnly {
		return o, f, errors.New("--record records a verdict; --report-only has none")
	}
	return o, f, nil
}

func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func kubeClient() (client.Client, error) {
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("--policy needs the Kubernetes API: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := tailcutv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := addCore(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// fromPolicy fills what the flags left out from the policy.
func fromPolicy(ctx context.Context, c client.Client, name string, o *Options) (*tailcutv1alpha1.HedgePolicy, error) {
	ns, n, ok := strings.Cut(name, "/")
	if !ok || ns == "" || n == "" {
		return nil, fmt.Errorf("--policy %q: want namespace/name", name)
	}
	var p tailcutv1alpha1.HedgePolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &p); err != nil {
		return nil, fmt.Errorf("reading hedgepolicy %s: %w", name, err)
	}
	if p.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishEnvoyGateway {
		// The gateway's routes have no bypass route: tailcut verify's
		// reference arm has nothing to take.
		return nil, fmt.Errorf("hedgepolicy %s publishes to EnvoyGateway: tailcut verify measures XDS and Istio policies, whose proxies carry a bypass route for the unhedged arm; Envoy Gateway's routes have none yet", name)
	}
	o.Policy = name
	if o.Host == "" {
		o.Host = p.Spec.TargetRef.Name + "." + ns
	}
	if p.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishIstio && o.HedgedCluster == "" {
		// A sidecar's outbound cluster carries the hedged and the unhedged
		// routes alike: its counters cannot tell hedges from other retries.
		if len(o.EnvoyAdmin) > 0 || o.PrometheusURL != "" {
			o.NotMeasured = append(o.NotMeasured, "Envoy's counters: on Istio the Service's outbound cluster serves hedged and unhedged requests alike; the extra load comes from the replicas' counters (--workload-metrics) only")
		}
		o.EnvoyAdmin, o.PrometheusURL = nil, ""
	}
	if o.HedgedCluster == "" && p.Spec.EffectivePublishTarget() != tailcutv1alpha1.PublishIstio {
		o.HedgedCluster, o.UnhedgedCluster = ClustersOf(ns, p.Spec.TargetRef.Name, p.Spec.TargetRef.Port)
	}
	if o.BudgetPct == nil {
		b := float64(p.Spec.EffectiveBudget().MaxExtraLoadPercent)
		o.BudgetPct = &b
	}
	return &p, nil
}

func writeJSON(r *Report, path string, stdout io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
