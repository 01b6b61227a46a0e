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

// Package plan holds tailcut's intermediate representation: what one HedgePolicy
// asks of Envoy, once the delay is known and the endpoints are resolved. It knows
// nothing of Envoy protos or of the Kubernetes client, so every publisher (xDS,
// Istio) translates the same, already validated, deterministic value.
package plan

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Named validation errors. Callers match them with errors.Is.
var (
	ErrNameEmpty         = errors.New("plan name is empty")
	ErrServiceEmpty      = errors.New("service name or namespace is empty")
	ErrPortInvalid       = errors.New("service port must be between 1 and 65535")
	ErrNoHosts           = errors.New("no virtual host names")
	ErrPathPrefix        = errors.New("path prefix must start with /")
	ErrNoMethods         = errors.New("no hedged methods")
	ErrDelayInvalid      = errors.New("hedge delay must be positive")
	ErrMaxHedges         = errors.New("max hedges must be between 1 and 3")
	ErrRetryOnEmpty      = errors.New("retryOn is empty: Envoy would not hedge")
	ErrBudgetInvalid     = fmt.Errorf("budget percent must be between 1 and %d", MaxBudgetPercent)
	ErrMinConcurrency    = errors.New("min retry concurrency must be at least 1")
	ErrEndpointInvalid   = errors.New("endpoint address or port is invalid")
	ErrNameInvalid       = errors.New("not a Kubernetes name")
	ErrMethodUnknown     = errors.New("unknown HTTP method")
	ErrRetryOnUnknown    = errors.New("unknown retryOn condition")
	ErrEndpointsUnsorted = errors.New("endpoints are not sorted and unique")
	ErrWeightInvalid     = fmt.Errorf("endpoint weight must be between 0 (not weighted) and %d", FullWeight)
)

// BypassHeader selects the bypass route: a request carrying it with value "1"
// reaches the same cluster through the same hops, never hedged. A/B runs use it
// to measure the unhedged tail through the same Envoy.
const BypassHeader = "x-tailcut-bypass"

// RoutePlan is everything one HedgePolicy asks of Envoy.
type RoutePlan struct {
	// Name is unique per policy ("<namespace>/<name>") and keys the plan in
	// publishers.
	Name string `json:"name"`
	// Namespace and Service name the target Service.
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// Port is the Service port that is hedged.
	Port int32 `json:"port"`
	// Hosts are the virtual host names the route answers to: the Service's
	// namespaced and cluster-local names, each with and without the port, never
	// the bare Service name (see ServiceHosts). Sorted.
	Hosts []string `json:"hosts"`
	// Match selects the requests that are hedged. Requests outside it still reach
	// the cluster, unhedged.
	Match Match `json:"match"`
	// Hedge is nil when hedging is off (a fallback of Disable, or paused because
	// it hurts). The routes then stay in place, without hedging, so traffic never
	// stops because metrics did.
	Hedge *Hedge `json:"hedge,omitempty"`
	// Budget bounds concurrent hedges at the cluster (Envoy's retry_budget).
	Budget Budget `json:"budget"`
	// Endpoints are the ready backends of the Service port. Sorted, unique. May be
	// empty: Envoy then answers 503 rather than the route disappearing.
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// Affinity, when set, spreads requests by a hash of a key instead of
	// round robin, and sends hedges to the key's next owners.
	Affinity *Affinity `json:"affinity,omitempty"`
}

// DeepCopy returns a copy of the plan that shares nothing with it, for
// publishers that keep plans: a caller may change its plan after publishing.
func (p RoutePlan) DeepCopy() RoutePlan {
	c := p
	c.Hosts = slices.Clone(p.Hosts)
	c.Match.Methods = slices.Clone(p.Match.Methods)
	c.Endpoints = slices.Clone(p.Endpoints)
	if p.Hedge != nil {
		h := *p.Hedge
		h.RetryOn = slices.Clone(p.Hedge.RetryOn)
		c.Hedge = &h
	}
	if p.Affinity != nil {
		a := *p.Affinity
		c.Affinity = &a
	}
	return c
}

// Match is a path prefix and the methods hedged under it.
type Match struct {
	PathPrefix string `json:"pathPrefix"`
	// Methods are upper-case and sorted.
	Methods []string `json:"methods"`
}

// Hedge is the hedging part of the route.
type Hedge struct {
	// Delay is how long the first attempt runs before a hedge is sent. It becomes
	// the route's per_try_timeout, which Envoy uses as the hedge delay when
	// hedge_on_per_try_timeout is set.
	Delay time.Duration `json:"delay"`
	// MaxHedges is Envoy's num_retries: the most extra attempts per request.
	MaxHedges int32 `json:"maxHedges"`
	// RetryOn must be non-empty or Envoy silently never hedges. Sorted.
	RetryOn []string `json:"retryOn"`
}

// Budget bounds the extra load twice: the cluster's retry budget caps
// concurrent hedges, and the listener's hedge account caps their rate.
type Budget struct {
	// Percent is the policy's maxExtraLoadPercent, up to MaxBudgetPercent
	// (a fan-out's two copies of every request). It sets the hedge account's
	// rate (HedgeRatio), and retry_budget.budget_percent (concurrent hedges
	// as a share of active requests) up to Envoy's limit of 100
	// (RetryBudgetPercent).
	Percent int32 `json:"percent"`
	// MinConcurrency is retry_budget.min_retry_concurrency.
	MinConcurrency int32 `json:"minConcurrency"`
}

// HedgeRatio is the share of requests the policy's hedge account lets Envoy
// hedge within its HedgeWindow: exactly the budget. An earlier account let
// the budget plus one point through, so that a delay asking for a little more
// than the budget kept its tail cut; it sent 5.3% extra load under a 5%
// budget in the local stack. The account now counts over a sliding window
// instead of a small bucket, and commits a request's hedges from its arrival
// to its answer, so it holds the budget itself (#14).
func (b Budget) HedgeRatio() float64 { return float64(b.Percent) / 100 }

// MaxBudgetPercent is the largest budget: two copies of every request.
const MaxBudgetPercent = 200

// RetryBudgetPercent is retry_budget.budget_percent: the budget, up to the
// 100 Envoy takes. Above it the hedge account alone holds the budget, as it
// does below: a retry holds its place in Envoy's budget only during its
// back-off, so the retry budget never was the bound on hedges.
func (b Budget) RetryBudgetPercent() float64 { return float64(min(b.Percent, 100)) }

// Endpoint is one ready backend address.
type Endpoint struct {
	Address string `json:"address"`
	Port    int32  `json:"port"`
	// Weight, when not zero, is the endpoint's load-balancing weight on the
	// hedged cluster against FullWeight for the others: the estimator
	// weighs down an endpoint that answers far slower than the rest
	// (status.slowEndpoints). The bypass cluster, which stands for the
	// route without tailcut, keeps every endpoint even.
	Weight int32 `json:"weight,omitempty"`
}

// FullWeight is the load-balancing weight of the endpoints not weighted down
// when one is.
const FullWeight = 100

// Weighted says whether any endpoint is weighted down.
func Weighted(eps []Endpoint) bool {
	return slices.ContainsFunc(eps, func(e Endpoint) bool { return e.Weight != 0 })
}

// Input is what Build needs, gathered by the controller from the API and the
// estimator. It uses plain types so this package stays free of client-go.
type Input struct {
	PolicyNamespace string
	PolicyName      string
	Service         string
	Port            int32
	PathPrefix      string
	Methods         []string
	// Delay <= 0 means hedging is off.
	Delay          time.Duration
	MaxHedges      int32
	RetryOn        []string
	BudgetPercent  int32
	MinConcurrency int32
	Endpoints      []Endpoint
	Affinity       *Affinity
}

// Build turns an Input into a validated RoutePlan.
func Build(in Input) (RoutePlan, error) {
	p := RoutePlan{
		Name:      in.PolicyNamespace + "/" + in.PolicyName,
		Namespace: in.PolicyNamespace,
		Service:   in.Service,
		Port:      in.Port,
		Hosts:     ServiceHosts(in.Service, in.PolicyNamespace, in.Port),
		Match:     Match{PathPrefix: in.PathPrefix, Methods: sortedUpper(in.Methods)},
		Budget:    Budget{Percent: in.BudgetPercent, MinConcurrency: in.MinConcurrency},
		Endpoints: sortedEndpoints(in.Endpoints),
	}
	if in.Affinity != nil {
		a := *in.Affinity
		p.Affinity = &a
	}
	if in.Delay > 0 {
		retryOn := slices.Clone(in.RetryOn)
		slices.Sort(retryOn)
		p.Hedge = &Hedge{Delay: in.Delay, MaxHedges: in.MaxHedges, RetryOn: slices.Compact(retryOn)}
	}
	return p, p.Validate()
}

// ServiceHosts returns the names a client may use for a Service port, sorted:
// <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local, each with and
// without the port. Never the bare <svc>: one proxy serves clients of every
// namespace and cannot know which namespace a client means, so a bare name
// would let a policy in one namespace take the traffic meant for a Service of
// the same name in another.
func ServiceHosts(svc, ns string, port int32) []string {
	var hosts []string
	for _, h := range []string{svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"} {
		hosts = append(hosts, h, fmt.Sprintf("%s:%d", h, port))
	}
	slices.Sort(hosts)
	return hosts
}

// What the API admits (api/v1alpha1), checked again here because plans are
// also built from status by followers and by tests.
var (
	methods           = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"}
	retryOnConditions = []string{"reset", "reset-before-request", "connect-failure", "refused-stream", "retriable-4xx", "gateway-error", "5xx", "envoy-ratelimited"}
	pathPrefix        = regexp.MustCompile(`^/[^?#\s]*$`)
)

// Validate checks the plan and returns every problem, joined.
func (p RoutePlan) Validate() error {
	var errs []error
	if p.Name == "" || p.Name == "/" {
		errs = append(errs, ErrNameEmpty)
	}
	if p.Service == "" || p.Namespace == "" {
		errs = append(errs, ErrServiceEmpty)
	}
	// Names become Envoy resource names and host names: what the API server
	// admits, and nothing Envoy would refuse (FuzzPlanToEnvoy found a
	// Service name that was not UTF-8).
	for what, name := range map[string]string{"namespace": p.Namespace, "service": p.Service} {
		if name != "" && len(validation.IsDNS1123Label(name)) > 0 {
			errs = append(errs, fmt.Errorf("%w: %s %q", ErrNameInvalid, what, name))
		}
	}
	if ns, name, ok := strings.Cut(p.Name, "/"); ok && name != "" && (ns != p.Namespace || len(validation.IsDNS1123Subdomain(name)) > 0) {
		errs = append(errs, fmt.Errorf("%w: policy %q", ErrNameInvalid, p.Name))
	}
	if p.Port < 1 || p.Port > 65535 {
		errs = append(errs, ErrPortInvalid)
	}
	if len(p.Hosts) == 0 {
		errs = append(errs, ErrNoHosts)
	}
	if len(p.Match.PathPrefix) > 1024 || !pathPrefix.MatchString(p.Match.PathPrefix) || !utf8.ValidString(p.Match.PathPrefix) {
		errs = append(errs, ErrPathPrefix)
	}
	if len(p.Match.Methods) == 0 {
		errs = append(errs, ErrNoMethods)
	}
	for _, m := range p.Match.Methods {
		if !slices.Contains(methods, m) {
			errs = append(errs, fmt.Errorf("%w: %q", ErrMethodUnknown, m))
		}
	}
	if h := p.Hedge; h != nil {
		if h.Delay <= 0 {
			errs = append(errs, ErrDelayInvalid)
		}
		if h.MaxHedges < 1 || h.MaxHedges > 3 {
			errs = append(errs, ErrMaxHedges)
		}
		if len(h.RetryOn) == 0 {
			errs = append(errs, ErrRetryOnEmpty)
		}
		for _, c := range h.RetryOn {
			if !slices.Contains(retryOnConditions, c) {
				errs = append(errs, fmt.Errorf("%w: %q", ErrRetryOnUnknown, c))
			}
		}
	}
	if p.Budget.Percent < 1 || p.Budget.Percent > MaxBudgetPercent {
		errs = append(errs, ErrBudgetInvalid)
	}
	if p.Budget.MinConcurrency < 1 {
		errs = append(errs, ErrMinConcurrency)
	}
	if p.Affinity != nil {
		errs = append(errs, p.Affinity.validate()...)
	}
	for i, e := range p.Endpoints {
		if _, err := netip.ParseAddr(e.Address); err != nil || e.Port < 1 || e.Port > 65535 {
			errs = append(errs, fmt.Errorf("%w: %s:%d", ErrEndpointInvalid, e.Address, e.Port))
		}
		if e.Weight < 0 || e.Weight > FullWeight {
			errs = append(errs, fmt.Errorf("%w: %s:%d", ErrWeightInvalid, e.Address, e.Port))
		}
		if i > 0 && compareEndpoints(p.Endpoints[i-1], e) >= 0 {
			errs = append(errs, ErrEndpointsUnsorted)
		}
	}
	return errors.Join(errs...)
}

func sortedUpper(in []string) []string {
	out := make([]string, 0, len(in))
	for _, m := range in {
		out = append(out, strings.ToUpper(m))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedEndpoints(in []Endpoint) []Endpoint {
	out := slices.Clone(in)
	slices.SortFunc(out, compareEndpoints)
	return slices.CompactFunc(out, func(a, b Endpoint) bool { return compareEndpoints(a, b) == 0 })
}

func compareEndpoints(a, b Endpoint) int {
	if c := strings.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}
