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

package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults that the API server applies (kubebuilder markers) and that the controller
// applies when an optional block is absent. Keep both in step: the markers below
// repeat these literals because markers cannot refer to Go constants.
const (
	DefaultQuantile            = 0.95
	DefaultWindow              = "2m"
	DefaultMinDelay            = "5ms"
	DefaultMaxDelay            = "1s"
	DefaultStaleAfter          = "5m"
	DefaultMinSamples          = 100
	DefaultDeadbandPercent     = 10
	DefaultMaxStepPercent      = 50
	DefaultEvaluationInterval  = "30s"
	DefaultMaxExtraLoadPercent = 5
	DefaultMinRetryConcurrency = 3
	DefaultWorkloadMetric      = "http_request_duration_seconds"
)

// HedgePolicySpec asks tailcut to hedge requests to one Service port: when the first
// attempt has not answered after the hedge delay, Envoy sends another attempt to a
// different endpoint and returns whichever answers first.
//
// +kubebuilder:validation:XValidation:rule="(has(self.allowNonIdempotent) && self.allowNonIdempotent) || !has(self.match) || !has(self.match.methods) || self.match.methods.all(m, m in ['GET', 'HEAD', 'OPTIONS'])",message="methods other than GET, HEAD and OPTIONS are not idempotent: set allowNonIdempotent: true to hedge them",fieldPath=".match.methods"
// +kubebuilder:validation:XValidation:rule="!has(self.delay.auto) || !has(self.delay.auto.staleAfter) || duration(self.delay.auto.staleAfter) >= duration(self.evaluationInterval)",message="staleAfter must not be shorter than evaluationInterval",fieldPath=".delay.auto.staleAfter"
// +kubebuilder:validation:XValidation:rule="!has(self.publish.target) || self.publish.target != 'Istio' || !has(self.match) || !has(self.match.pathPrefix) || self.match.pathPrefix == '/'",message="publish.target Istio hedges every path of the Service (the EnvoyFilter patches the Service's one route): leave match.pathPrefix unset or /",fieldPath=".match.pathPrefix"
// +kubebuilder:validation:XValidation:rule="!has(self.publish.target) || self.publish.target != 'EnvoyGateway' || !has(self.match) || !has(self.match.pathPrefix) || self.match.pathPrefix == '/'",message="publish.target EnvoyGateway hedges the HTTPRoute rules that send to the Service, on every path they match: leave match.pathPrefix unset or /, and give the paths to hedge their own HTTPRoute rule",fieldPath=".match.pathPrefix"
// +kubebuilder:validation:XValidation:rule="!has(self.publish.target) || self.publish.target != 'EnvoyGateway' || !has(self.affinity)",message="publish.target EnvoyGateway does not take affinity yet: Envoy Gateway builds the rule's cluster and its load balancer (BackendTrafficPolicy loadBalancer ConsistentHash); hedge without affinity or publish to XDS or Istio",fieldPath=".affinity"
// +kubebuilder:validation:XValidation:rule="!has(self.budget.maxExtraLoadPercent) || self.budget.maxExtraLoadPercent <= 50 || (has(self.delay.mode) && self.delay.mode == 'FanOut')",message="maxExtraLoadPercent above 50 is for delay.mode FanOut only: a delayed hedge goes only to requests slower than the delay, a budget that large would let a too-short delay double the backends' load",fieldPath=".budget.maxExtraLoadPercent"
// +kubebuilder:validation:XValidation:rule="!has(self.delay.mode) || self.delay.mode != 'FanOut' || (has(self.budget.maxExtraLoadPercent) && self.budget.maxExtraLoadPercent >= 100)",message="delay.mode FanOut sends copies of every request at once and costs what it copies: set budget.maxExtraLoadPercent to 100 (one copy of each request, twice the backends' load) up to 200 (maxHedges 2, three times the load)",fieldPath=".budget.maxExtraLoadPercent"
// +kubebuilder:validation:XValidation:rule="!has(self.delay.mode) || self.delay.mode != 'FanOut' || (!(has(self.allowNonIdempotent) && self.allowNonIdempotent) && (!has(self.match) || !has(self.match.methods) || self.match.methods.all(m, m in ['GET', 'HEAD'])))",message="delay.mode FanOut copies every request it matches: only GET and HEAD may be fanned out (leave allowNonIdempotent unset)",fieldPath=".match.methods"
type HedgePolicySpec struct {
	// TargetRef names the Service, in the policy's namespace, whose traffic is hedged.
	// +required
	TargetRef TargetRef `json:"targetRef"`

	// Match selects the requests to hedge. Requests that do not match still reach the
	// Service through tailcut's proxy, without hedging.
	// +optional
	// +kubebuilder:default={pathPrefix:"/",methods:{"GET","HEAD"}}
	Match *Match `json:"match,omitempty"`

	// AllowNonIdempotent permits methods other than GET, HEAD and OPTIONS in
	// match.methods. A hedged request may run twice on the backend, so only set this
	// when those requests are safe to repeat.
	// +optional
	AllowNonIdempotent bool `json:"allowNonIdempotent,omitempty"`

	// Delay says how long Envoy waits for the first attempt before it sends a hedge.
	// +optional
	// +kubebuilder:default={mode:"Auto"}
	Delay Delay `json:"delay"`

	// MaxHedges is the most extra attempts a single request may get (Envoy's
	// num_retries). Each hedge waits one more delay after the previous attempt.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 3",message="maxHedges must be 1, 2 or 3"
	MaxHedges int32 `json:"maxHedges,omitempty"`

	// Budget bounds the extra load hedging may add to the backends.
	// +optional
	// +kubebuilder:default={maxExtraLoadPercent:5,minRetryConcurrency:3}
	Budget Budget `json:"budget"`

	// RetryOn lists the Envoy retry conditions set on the hedged route. Envoy only
	// hedges when this list is non-empty, so it can never be empty. The conditions
	// also allow a normal retry of a failed attempt, inside the same budget.
	// +optional
	// +listType=set
	// +kubebuilder:default={"reset","connect-failure"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	RetryOn []RetryOn `json:"retryOn,omitempty"`

	// EvaluationInterval is how often tailcut re-derives the delay and checks the
	// hedge rate. At most one delay change is published per interval.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="evaluationInterval must be between 5s and 1h"
	EvaluationInterval *metav1.Duration `json:"evaluationInterval,omitempty"`

	// Publish says how the hedge settings reach Envoy.
	// +optional
	// +kubebuilder:default={target:"XDS"}
	Publish Publish `json:"publish"`

	// Affinity keeps each key on the replica that owns it, for services whose
	// replicas cache by key: requests are spread by a hash of the key
	// (Envoy's ring hash or Maglev load balancer) instead of round robin, and a
	// hedge goes to the key's next owner, the same replica for every request
	// of the key, whose cache is warm for it. Without it a hedge goes to any
	// other replica.
	// +optional
	Affinity *Affinity `json:"affinity,omitempty"`

	// Suspend turns hedging off and keeps the route: requests still reach the
	// Service through tailcut's proxy, unhedged, and nothing is read from
	// Prometheus. Deleting the policy instead would take the route away.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// Default sizes of the consistent-hash tables: Envoy's own.
const (
	DefaultRingSize  = 1024
	DefaultTableSize = 65537
)

// AffinityLoadBalancer names the consistent-hash load balancer.
// +kubebuilder:validation:Enum=RingHash;Maglev
type AffinityLoadBalancer string

const (
	// LoadBalancerRingHash places each replica ringSize/replicas times on a
	// ring; a key belongs to the first entry clockwise of its hash, and its
	// hedge to the next entry of another replica (its successor on the ring).
	// Adding or removing a replica moves about 1/replicas of the keys.
	LoadBalancerRingHash AffinityLoadBalancer = "RingHash"
	// LoadBalancerMaglev fills a table of tableSize slots from each replica's
	// preference list: a steadier spread than the ring and a constant-time
	// lookup, but a hedge goes to a fixed alternate slot of the key rather
	// than its ring successor, and more keys move when replicas change.
	LoadBalancerMaglev AffinityLoadBalancer = "Maglev"
)

// Affinity spreads requests by a hash of a key taken from each request.
//
// +kubebuilder:validation:XValidation:rule="(has(self.loadBalancer) && self.loadBalancer == 'Maglev') || !has(self.tableSize)",message="tableSize is for loadBalancer Maglev; RingHash takes ringSize",fieldPath=".tableSize"
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancer) || self.loadBalancer == 'RingHash' || !has(self.ringSize)",message="ringSize is for loadBalancer RingHash; Maglev takes tableSize",fieldPath=".ringSize"
type Affinity struct {
	// HashOn is where the key comes from.
	// +required
	HashOn HashOn `json:"hashOn"`

	// LoadBalancer is RingHash (the default) or Maglev, on both the hedged and
	// the bypass cluster, so that an A/B compares like with like.
	// +optional
	// +kubebuilder:default=RingHash
	LoadBalancer AffinityLoadBalancer `json:"loadBalancer,omitempty"`

	// RingSize is the fewest entries on the ring (Envoy's minimum_ring_size):
	// more entries spread the keys more evenly, at 16 bytes each per proxy.
	// Default 1024.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 64 && self <= 8388608",message="ringSize must be between 64 and 8388608 entries"
	RingSize *int32 `json:"ringSize,omitempty"`

	// TableSize is the number of slots in the Maglev table, a prime: at least
	// 100 times the replicas keeps the spread within 1%. Default 65537.
	// +optional
	// +kubebuilder:validation:Enum=251;509;1021;2039;4093;8191;16381;32749;65537;131071;262139;524287;1048573;2097143;4194301
	TableSize *int32 `json:"tableSize,omitempty"`
}

// HashOn names the part of the request whose value is the key: exactly one of
// header, cookie, queryParameter and path. A request without it (no such
// header, cookie or parameter) goes to a replica at random, and its hedge to
// another.
//
// +kubebuilder:validation:XValidation:rule="[has(self.header), has(self.cookie), has(self.queryParameter), has(self.path) && self.path].exists_one(x, x)",message="set exactly one of header, cookie, queryParameter and path: true"
type HashOn struct {
	// Header is the name of a request header, for example x-cache-key.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Header string `json:"header,omitempty"`

	// Cookie is the name of a cookie the client sends. tailcut never sets it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	Cookie string `json:"cookie,omitempty"`

	// QueryParameter is the name of a query parameter, for example key.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^&=#\s]+$`
	QueryParameter string `json:"queryParameter,omitempty"`

	// Path hashes the request path, without its query string.
	// +optional
	Path bool `json:"path,omitempty"`
}

// TargetRef names a port of a Service in the policy's namespace.
type TargetRef struct {
	// Kind of the target. Only Service is supported.
	// +optional
	// +kubebuilder:default=Service
	// +kubebuilder:validation:Enum=Service
	Kind string `json:"kind,omitempty"`

	// Name of the Service.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Port is the Service port (spec.ports[].port) whose traffic is hedged.
	// +required
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 65535",message="port must be between 1 and 65535"
	Port int32 `json:"port"`
}

// Match selects requests by path prefix and method.
type Match struct {
	// PathPrefix matches requests whose path starts with this prefix.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[^?#\s]*$`
	PathPrefix string `json:"pathPrefix,omitempty"`

	// Methods are the HTTP methods that are hedged. Methods other than GET, HEAD and
	// OPTIONS need allowNonIdempotent.
	// +optional
	// +listType=set
	// +kubebuilder:default={"GET","HEAD"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	Methods []HTTPMethod `json:"methods,omitempty"`
}

// HTTPMethod is an HTTP request method.
// +kubebuilder:validation:Enum=GET;HEAD;OPTIONS;POST;PUT;PATCH;DELETE
type HTTPMethod string

// RetryOn is one of Envoy's x-envoy-retry-on conditions.
// +kubebuilder:validation:Enum=reset;reset-before-request;connect-failure;refused-stream;retriable-4xx;gateway-error;"5xx";envoy-ratelimited
type RetryOn string

// DelayMode says where the hedge delay comes from.
// +kubebuilder:validation:Enum=Auto;Static;FanOut
type DelayMode string

const (
	// DelayModeAuto derives the delay from a latency quantile in Prometheus.
	DelayModeAuto DelayMode = "Auto"
	// DelayModeStatic uses a fixed delay.
	DelayModeStatic DelayMode = "Static"
	// DelayModeFanOut sends each request's hedges at once, FanOutDelay apart,
	// without waiting for the first attempt to run long: up to maxHedges+1
	// copies of every request, each to a different replica. It buys the
	// fastest tail at the price of the copies (budget 100 to 200 percent),
	// for read paths whose backends have the capacity to spare.
	DelayModeFanOut DelayMode = "FanOut"
)

// FanOutDelay is the per-try timeout of DelayModeFanOut: Envoy sends a hedge
// only when an attempt's per-try timeout fires (it does not implement
// hedge_policy.initial_requests), and 1ms is the shortest the API takes.
// With the route's 1ms back-off the copies leave within a few milliseconds.
const FanOutDelay = time.Millisecond

// Delay configures the hedge delay (Envoy's per_try_timeout on the hedged route).
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Static' || has(self.static)",message="static is required when mode is Static",fieldPath=".static"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Static' || !has(self.auto)",message="auto must not be set when mode is Static",fieldPath=".auto"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Auto' || !has(self.static)",message="static must not be set when mode is Auto",fieldPath=".static"
// +kubebuilder:validation:XValidation:rule="self.mode != 'FanOut' || (!has(self.static) && !has(self.auto))",message="delay.mode FanOut takes neither static nor auto: its copies leave 1ms apart",fieldPath=".mode"
type Delay struct {
	// Mode is Auto (derive the delay from Prometheus), Static (use
	// delay.static) or FanOut (send the hedges at once, within a budget of 100
	// to 200 percent, for GET and HEAD only).
	// +optional
	// +kubebuilder:default=Auto
	Mode DelayMode `json:"mode,omitempty"`

	// Static is the fixed delay used in Static mode, between 1ms and 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="static must be between 1ms and 10s"
	Static *metav1.Duration `json:"static,omitempty"`

	// Auto tunes Auto mode. When absent, every field takes its default.
	// +optional
	Auto *AutoDelay `json:"auto,omitempty"`
}

// EstimateSource names the latency histogram the delay is derived from.
// +kubebuilder:validation:Enum=Envoy;Workload;Custom
type EstimateSource string

const (
	// EstimateSourceEnvoy reads the hedged route's own traffic in tailcut's Envoy:
	// its upstream latency histogram and its hedge counters. Below the delay in
	// force the histogram is exact (those requests were never hedged), and the
	// counters measure exactly how many requests are slower than the delay, so
	// ordinary client traffic is all the estimator needs. Traffic that skips
	// hedging (the x-tailcut-bypass header, other methods and paths) is never
	// read.
	//
	// With publish.target Istio, Envoy is the clients' sidecars in the
	// policy's namespace: the latency histogram and the hedge counters of the
	// hedged routes alone (upstream_rq_time, upstream_rq_retry and
	// upstream_rq_total of the routes the EnvoyFilter gives the stat_prefix
	// tailcut_hedged), not the Service's outbound cluster, which the unhedged
	// methods and the bypass share. Istio exports route stats by default from
	// 1.23; before, the mesh's proxyStatsMatcher must include them, and until
	// then delayReason says so and the budget guard is off.
	EstimateSourceEnvoy EstimateSource = "Envoy"
	// EstimateSourceWorkload reads the application's own request-duration histogram.
	EstimateSourceWorkload EstimateSource = "Workload"
	// EstimateSourceCustom runs the PromQL template in auto.query.
	EstimateSourceCustom EstimateSource = "Custom"
)

// AutoDelay derives the delay from a latency quantile and keeps it stable and inside
// the budget.
//
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || duration(self.min) <= duration(self.max)",message="min must not be greater than max",fieldPath=".min"
// +kubebuilder:validation:XValidation:rule="self.source == 'Custom' ? has(self.query) : !has(self.query)",message="query is required when source is Custom and not allowed otherwise",fieldPath=".query"
// +kubebuilder:validation:XValidation:rule="self.source == 'Workload' || !has(self.workload)",message="workload is only allowed when source is Workload",fieldPath=".workload"
type AutoDelay struct {
	// Quantile of the latency distribution used as the delay, in (0.5, 0.999].
	// With independent slowness, the (1 - budget) quantile sends about budget% extra
	// requests.
	// +optional
	// +kubebuilder:default=0.95
	// +kubebuilder:validation:XValidation:rule="self > 0.5 && self <= 0.999",message="quantile must be greater than 0.5 and at most 0.999 (0.999 is p99.9; 1.0 would be the slowest request, which no delay can beat)"
	Quantile float64 `json:"quantile,omitempty"`

	// Source is the histogram the quantile is read from.
	// +optional
	// +kubebuilder:default=Envoy
	Source EstimateSource `json:"source,omitempty"`

	// Window is the range over which latency is aggregated, between 15s and 1h.
	// +optional
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('15s') && duration(self) <= duration('1h')",message="window must be between 15s and 1h"
	Window *metav1.Duration `json:"window,omitempty"`

	// Min is the smallest delay ever programmed, between 1ms and 10s.
	// +optional
	// +kubebuilder:default="5ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="min must be between 1ms and 10s"
	Min *metav1.Duration `json:"min,omitempty"`

	// Max is the largest delay ever programmed, between 1ms and 10s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="max must be between 1ms and 10s"
	Max *metav1.Duration `json:"max,omitempty"`

	// Fallback is what happens when no trustworthy delay can be derived for longer
	// than staleAfter (metrics missing, too few samples, query errors).
	// +optional
	// +kubebuilder:default={action:"Disable"}
	Fallback *Fallback `json:"fallback,omitempty"`

	// StaleAfter is how long the last good delay is kept while metrics are missing
	// before the fallback applies. It must not be shorter than evaluationInterval.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('24h')",message="staleAfter must be between 5s and 24h"
	StaleAfter *metav1.Duration `json:"staleAfter,omitempty"`

	// MinSamples is the fewest requests in the window for a quantile to be trusted.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 1000000",message="minSamples must be between 1 and 1000000"
	MinSamples int32 `json:"minSamples,omitempty"`

	// DeadbandPercent ignores a new delay that differs from the programmed one by
	// less than this percentage, so noise does not cause pushes.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 100",message="deadbandPercent must be between 0 and 100"
	DeadbandPercent int32 `json:"deadbandPercent,omitempty"`

	// MaxStepPercent limits how far the delay moves in one evaluation, as a
	// percentage of the programmed delay.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 1000",message="maxStepPercent must be between 1 and 1000"
	MaxStepPercent int32 `json:"maxStepPercent,omitempty"`

	// Workload names the application's histogram when source is Workload.
	// +optional
	Workload *WorkloadMetric `json:"workload,omitempty"`

	// Query is a PromQL template used when source is Custom. It is text with the
	// variables {{.Namespace}}, {{.Service}}, {{.Port}}, {{.Quantile}} and
	// {{.Window}}, and nothing else (no actions, functions or pipelines), and
	// must return one series whose value is the latency in seconds. Every
	// series it reads must carry namespace="{{.Namespace}}" (or name the
	// policy's own Envoy cluster in envoy_cluster_name): a policy reads its own
	// namespace's metrics only. Each query is bounded by the operator's
	// --prometheus-timeout.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query,omitempty"`
}

// FallbackAction is what tailcut programs when no delay can be derived.
// +kubebuilder:validation:Enum=Static;Disable
type FallbackAction string

const (
	// FallbackStatic programs fallback.delay.
	FallbackStatic FallbackAction = "Static"
	// FallbackDisable turns hedging off until a delay can be derived again.
	FallbackDisable FallbackAction = "Disable"
)

// Fallback is the delay used when metrics cannot be trusted.
//
// +kubebuilder:validation:XValidation:rule="self.action == 'Static' ? has(self.delay) : !has(self.delay)",message="delay is required when action is Static and not allowed when action is Disable",fieldPath=".delay"
type Fallback struct {
	// Action is Static (use delay) or Disable (stop hedging).
	// +optional
	// +kubebuilder:default=Disable
	Action FallbackAction `json:"action,omitempty"`

	// Delay is the static delay used when action is Static, between 1ms and 10s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('10s')",message="delay must be between 1ms and 10s"
	Delay *metav1.Duration `json:"delay,omitempty"`
}

// WorkloadMetric names the application's request-duration histogram.
type WorkloadMetric struct {
	// Metric is the histogram's base name, without the _bucket suffix.
	// +optional
	// +kubebuilder:default=http_request_duration_seconds
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_:][a-zA-Z0-9_:]*$`
	Metric string `json:"metric,omitempty"`

	// Labels are extra equality matchers added to the query, for example
	// {job: "checkout"}. The namespace label is always added.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-zA-Z_][a-zA-Z0-9_]*$') && size(k) <= 100 && size(self[k]) <= 256)",message="label names must be Prometheus label names (at most 100 characters) and values at most 256 characters"
	Labels map[string]string `json:"labels,omitempty"`
}

// Budget bounds the extra load hedging may add.
type Budget struct {
	// MaxExtraLoadPercent is the most extra requests hedging may send, as a
	// percentage of the requests on the hedged route: between 1 and 50 for a
	// delayed hedge, 100 to 200 for delay.mode FanOut, whose copies cost 100
	// per extra copy of every request. tailcut's hedge account holds it in the
	// data path over every stretch of its window; it also becomes Envoy's
	// retry_budget.budget_percent (at most 100, Envoy's limit), and the
	// estimator raises the delay or pauses hedging when the measured hedge
	// rate goes above it.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 200",message="maxExtraLoadPercent must be between 1 and 200 (percent of the requests; above 50 only with delay.mode FanOut)"
	MaxExtraLoadPercent int32 `json:"maxExtraLoadPercent,omitempty"`

	// MinRetryConcurrency is the number of hedges always allowed in flight, whatever
	// the budget (Envoy's retry_budget.min_retry_concurrency), so that hedging works
	// at low request rates.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 1000",message="minRetryConcurrency must be between 1 and 1000"
	MinRetryConcurrency int32 `json:"minRetryConcurrency,omitempty"`
}

// PublishTarget names the way hedge settings reach Envoy.
// +kubebuilder:validation:Enum=XDS;Istio;EnvoyGateway
type PublishTarget string

const (
	// PublishXDS serves the settings from tailcut's own xDS server.
	PublishXDS PublishTarget = "XDS"
	// PublishIstio writes an Istio EnvoyFilter next to the policy.
	PublishIstio PublishTarget = "Istio"
	// PublishEnvoyGateway writes an EnvoyPatchPolicy for each Envoy Gateway
	// Gateway whose HTTPRoutes send to the Service: the hedge on the routes
	// of those HTTPRoute rules, and the hedge account on the Gateway's
	// listeners.
	PublishEnvoyGateway PublishTarget = "EnvoyGateway"
)

// Publish says how the hedge settings reach Envoy.
type Publish struct {
	// Target is XDS (tailcut's own xDS server and Envoy), Istio (an
	// EnvoyFilter) or EnvoyGateway (EnvoyPatchPolicies on the Gateways whose
	// HTTPRoutes send to the Service).
	// +optional
	// +kubebuilder:default=XDS
	Target PublishTarget `json:"target,omitempty"`
	// Istio tunes target Istio.
	// +optional
	Istio *IstioPublish `json:"istio,omitempty"`
}

// IstioContext names the proxies an EnvoyFilter patches.
// +kubebuilder:validation:Enum=SidecarOutbound;Gateway
type IstioContext string

const (
	// IstioSidecarOutbound patches the sidecars of the policy's namespace, on
	// their way out to the Service: Istio applies an EnvoyFilter to the
	// workloads of its own namespace, so clients in other namespaces are not
	// hedged.
	IstioSidecarOutbound IstioContext = "SidecarOutbound"
	// IstioGateway patches the Istio gateways that run in the policy's
	// namespace, on routes whose virtual host is the Service's
	// (<svc>.<ns>.svc.cluster.local:<port>, a VirtualService host).
	IstioGateway IstioContext = "Gateway"
)

// IstioPublish tunes the EnvoyFilter written for target Istio.
type IstioPublish struct {
	// Context says which proxies hedge: SidecarOutbound (the default) or Gateway.
	// +optional
	// +kubebuilder:default=SidecarOutbound
	Context IstioContext `json:"context,omitempty"`
}

// DelaySource says where the programmed delay came from.
// +kubebuilder:validation:Enum=Static;FanOut;Prometheus;LastKnown;Fallback;None
type DelaySource string

const (
	// DelaySourceStatic is spec.delay.static.
	DelaySourceStatic DelaySource = "Static"
	// DelaySourceFanOut is delay.mode FanOut: FanOutDelay.
	DelaySourceFanOut DelaySource = "FanOut"
	// DelaySourcePrometheus is a quantile read from Prometheus in this evaluation.
	DelaySourcePrometheus DelaySource = "Prometheus"
	// DelaySourceLastKnown is the last good Prometheus value, kept while metrics are
	// missing for less than staleAfter.
	DelaySourceLastKnown DelaySource = "LastKnown"
	// DelaySourceFallback is the fallback delay.
	DelaySourceFallback DelaySource = "Fallback"
	// DelaySourceNone means hedging is off (fallback Disable, or paused).
	DelaySourceNone DelaySource = "None"
)

// HedgePolicyStatus reports what tailcut did with the policy and why.
type HedgePolicyStatus struct {
	// ObservedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// EffectiveDelay is the hedge delay programmed into Envoy. Empty when hedging is
	// off.
	// +optional
	// +kubebuilder:validation:Type=string
	EffectiveDelay *metav1.Duration `json:"effectiveDelay,omitempty"`

	// DelaySource says where EffectiveDelay came from.
	// +optional
	DelaySource DelaySource `json:"delaySource,omitempty"`

	// DelayReason is a one-line, human explanation of the delay.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	DelayReason string `json:"delayReason,omitempty"`

	// Quantile is the last latency quantile read from Prometheus.
	// +optional
	Quantile *QuantileObservation `json:"quantile,omitempty"`

	// HedgeRate is the measured share of extra requests against the budget.
	// +optional
	HedgeRate *HedgeRateObservation `json:"hedgeRate,omitempty"`

	// BudgetFloor is the longest delay at which the hedge counters, or the
	// share of requests the latency histogram proves slower than the delay,
	// recently showed significantly more extra load than the budget allows,
	// beyond a burst in one of the sampler's reads. Until it is one window
	// old, tailcut keeps the delay above it, so it never goes back to a delay
	// proved too short.
	// +optional
	BudgetFloor *BudgetFloor `json:"budgetFloor,omitempty"`

	// SlowEndpoints are the endpoints tailcut sends less of the hedged
	// traffic to, because their requests take far longer than the others'
	// (an Auto policy published by xDS; see EndpointsBalanced). Empty when
	// none is.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=64
	SlowEndpoints []SlowEndpoint `json:"slowEndpoints,omitempty"`

	// Proxies counts the Envoy proxies that run this policy's configuration.
	// +optional
	Proxies *ProxyCounts `json:"proxies,omitempty"`

	// LastDelayChange is when EffectiveDelay last changed. At most one change is
	// published per evaluationInterval.
	// +optional
	LastDelayChange *metav1.Time `json:"lastDelayChange,omitempty"`

	// Conditions: Accepted, DelayDerived, Programmed, Ready and Hedging (and
	// RetriesPreserved on Istio, EndpointsBalanced on xDS with an Auto delay).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// QuantileObservation is one latency quantile read from Prometheus.
type QuantileObservation struct {
	// Quantile is the quantile that was read, for example 0.95: the configured
	// one, or a higher one when the budget allows fewer hedges.
	Quantile float64 `json:"quantile"`
	// Value is the observed latency at that quantile, read conservatively: at
	// most 1 - quantile of the requests took longer.
	// +kubebuilder:validation:Type=string
	Value metav1.Duration `json:"value"`
	// LowerBound is true when the quantile lies above the delay in force. Hedging
	// hides how long the slow first attempts would have taken, so Value is then
	// only a lower bound, read from the hedged latency.
	// +optional
	LowerBound bool `json:"lowerBound,omitempty"`
	// Samples is the number of requests in the query window.
	// +optional
	Samples int64 `json:"samples,omitempty"`
	// SampledAt is when the query ran.
	SampledAt metav1.Time `json:"sampledAt"`
}

// HedgeRateObservation compares the measured hedge rate with the budget.
type HedgeRateObservation struct {
	// Percent is the extra requests sent by hedging (and retries), as a
	// percentage of the hedged route's requests, between Since and SampledAt.
	// It is exactly the share of requests slower than Delay.
	Percent float64 `json:"percent"`
	// BudgetPercent is spec.budget.maxExtraLoadPercent at the time of the reading.
	BudgetPercent int32 `json:"budgetPercent"`
	// Delay is the hedge delay that was in force over the whole reading; absent
	// when hedging was off.
	// +optional
	// +kubebuilder:validation:Type=string
	Delay *metav1.Duration `json:"delay,omitempty"`
	// Requests is the number of requests on the hedged route in the reading.
	// +optional
	Requests int64 `json:"requests,omitempty"`
	// Since is where the reading starts: the last delay change, or one window
	// back when the delay has not changed for a window.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// SampledAt is when the rate was read.
	SampledAt metav1.Time `json:"sampledAt"`
}

// SlowEndpoint is an endpoint weighted down on the hedged route. Its mean
// latency comes from Little's law over Envoy's per-endpoint stats: requests
// in flight on average, divided by requests per second. tailcut lowers its
// load-balancing weight so that it takes about half the budget's share of
// the hedged requests, which hedges can then cover; it keeps reading it, and
// gives the weight back once the endpoint answers within 1.5 times the
// median endpoint's mean.
type SlowEndpoint struct {
	// Address is the endpoint's IP and port, as Envoy names it.
	// +kubebuilder:validation:MaxLength=64
	Address string `json:"address"`
	// MeanLatency is the endpoint's mean time per request.
	// +kubebuilder:validation:Type=string
	MeanLatency metav1.Duration `json:"meanLatency"`
	// MedianLatency is the median of every endpoint's mean time per request.
	// +kubebuilder:validation:Type=string
	MedianLatency metav1.Duration `json:"medianLatency"`
	// RequestPercent is the share of the hedged route's requests the endpoint
	// took over the reading (the last 5 minutes), in percent: in the first
	// minutes after the weighing it mixes the shares before and after.
	RequestPercent float64 `json:"requestPercent"`
	// Weight is its load-balancing weight on the hedged route, against 100
	// for every other endpoint.
	Weight int32 `json:"weight"`
	// Since is when it was first weighted down.
	Since metav1.Time `json:"since"`
}

// BudgetFloor is a delay shown to be too short for the budget.
type BudgetFloor struct {
	// Delay is the delay in force when the hedge rate was measured over budget.
	// +kubebuilder:validation:Type=string
	Delay metav1.Duration `json:"delay"`
	// Percent is the hedge rate measured at Delay, or the share of
	// requests that ran past it when that is higher.
	Percent float64 `json:"percent"`
	// MeasuredAt is when the rate was read; the floor holds for one window.
	MeasuredAt metav1.Time `json:"measuredAt"`
}

// ProxyCounts counts proxies by how far they took this policy's configuration.
type ProxyCounts struct {
	// Connected is the number of proxies connected to tailcut that should run this
	// policy.
	Connected int32 `json:"connected"`
	// Programmed is the number of those that acknowledged the current version.
	Programmed int32 `json:"programmed"`
	// Version is the configuration version (a content hash) proxies should run.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hp,categories=tailcut
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.targetRef.port`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.delay.mode`,priority=1
// +kubebuilder:printcolumn:name="Delay",type=string,JSONPath=`.status.effectiveDelay`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.delaySource`
// +kubebuilder:printcolumn:name="Hedge%",type=number,JSONPath=`.status.hedgeRate.percent`
// +kubebuilder:printcolumn:name="Budget%",type=integer,JSONPath=`.spec.budget.maxExtraLoadPercent`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Hedging")].reason`
// +kubebuilder:printcolumn:name="Proxies",type=integer,JSONPath=`.status.proxies.programmed`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// HedgePolicy hedges idempotent requests to a Service: Envoy sends a second attempt
// to another endpoint when the first is slower than a delay tailcut derives from
// the Service's live latency, inside a budget for extra load.
type HedgePolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec defines what to hedge and how the delay is chosen.
	// +required
	Spec HedgePolicySpec `json:"spec"`

	// status reports the delay in force, why, and whether Envoy runs it.
	// +optional
	Status HedgePolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// HedgePolicyList contains a list of HedgePolicy.
type HedgePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HedgePolicy `json:"items"`
}
