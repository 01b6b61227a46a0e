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

package plan

import "time"

// Timing that every publisher renders the same way. The values follow from how
// Envoy hedges (see "Envoy facts" in the design brief); they are constants, not
// policy fields, because no user setting makes them better.
const (
	// DefaultRouteTimeout is Envoy's own default route timeout. Publishers state
	// it explicitly on unhedged routes, so a config dump shows the real bound and
	// hedged and unhedged routes are visibly comparable.
	DefaultRouteTimeout = 15 * time.Second

	// HedgeBackoffBase is retry_back_off.base_interval on the hedged route. Envoy
	// waits a jittered back-off before every retry, hedges included; with Envoy's
	// default of 25ms each hedge would leave up to 24ms after the delay, which is
	// as large as the delays tailcut derives. 1ms is Envoy's smallest value.
	HedgeBackoffBase = time.Millisecond

	// HedgeBackoffMax is retry_back_off.max_interval. Envoy's back-off grows
	// with each retry up to this cap, so it bounds the extra wait before the
	// second and third hedge.
	HedgeBackoffMax = 10 * time.Millisecond

	// HostSelectionRetryMaxAttempts is how often Envoy may re-pick a host for a
	// hedge when the previous_hosts predicate rejects the one it drew. Without
	// it a hedge can land on the replica that is already slow.
	HostSelectionRetryMaxAttempts = 3

	// HedgeWindow is the span over which the hedge account holds hedges to
	// HedgeRatio of the requests: within any HedgeWindow, at most that share
	// of the requests that arrived in it may be hedged. A sliding window, not
	// a token bucket: a bucket small enough to keep a 30 s window within the
	// budget (a few hedges) is too small for slow requests, which come in
	// random clusters, and denied a fifth of their hedges in a model of the
	// local stack; the window lets the budget that quiet seconds leave unused
	// pay for the busy ones in the same window. 30 s is the span over which
	// the budget is measured (the brownout test's windows, the dashboards'
	// rates).
	HedgeWindow = 30 * time.Second
)

// RouteTimeout is the whole-request timeout of the hedged route.
//
// With hedge_on_per_try_timeout the delay (per_try_timeout) does not end an
// attempt: the slow attempt keeps running next to its hedges, and only the route
// timeout ends the request. Hedge n starts at most n*(Delay+HedgeBackoffMax)
// after the request, so
//
//	RouteTimeout = MaxHedges*(Delay+HedgeBackoffMax) + DefaultRouteTimeout
//
// gives the last hedge as long as an unhedged request gets. Hedging thus never
// cuts a request shorter than the unhedged route would (with a 20ms delay and
// one hedge: 15.03s).
func (h *Hedge) RouteTimeout() time.Duration {
	return time.Duration(h.MaxHedges)*(h.Delay+HedgeBackoffMax) + DefaultRouteTimeout
}
