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

	// HedgeWindow is the hedge account's window: a request may be hedged
	// only if, with its own hedges, every stretch of the last window and a
	// quarter second to two windows and a quarter second, in quarter
	// seconds, holds hedges within HedgeRatio of the requests of all its
	// quarter seconds but the first (hedgeaccount's account), so that no
	// stretch of a window or more goes over the budget. Sliding stretches,
	// not a token bucket: a bucket small enough to keep a 30 s
	// stretch within the budget (a few hedges) is too small for slow
	// requests, which come in random clusters; a stretch lets the budget
	// that its quiet seconds leave unused pay for its busy ones. 30 s is the span
	// over which the budget is measured (the brownout test's windows, the
	// dashboards' rates).
	HedgeWindow = 30 * time.Second

	// HedgeLateThreshold is, in hedges, how much of the hedge account's
	// window a request must leave behind to be hedged at the delay: when
	// fewer would be left after its own hedges, it is hedged late
	// (Hedge.LateDelay). When the slow share of requests equals the budget
	// (5% slow under a 5% budget), a hedge of a fast request that ran a
	// little past the delay takes a slow request's place, and the account
	// then turns slow requests away. Beside two busy loops, where the fast
	// mode widens, the local stack's A/B then kept its hedged p99 at the
	// unhedged 115 ms; with late hedges it was 50.7 ms (idle: 47.6 ms, where
	// the window alone gave 36.8 ms). A late hedge costs a slow request half
	// a delay and leaves the fast mode's stragglers alone.
	//
	// So a hedge waits only while there are stragglers to leave alone: the
	// account (hedgeaccount's Account::quiet_band) sends it at the delay
	// when, of the requests that ended in its last 10 s (400 at least, for a
	// 5% budget), fewer than a tenth of the budget's share took between the
	// delay and the late delay. With a fast mode that ends before the delay
	// (the local stack idle), a hedge at the delay spends nothing more, and
	// the slow request is answered half a delay sooner; a fast mode that
	// reaches past the delay (a busy machine, a delay still catching up)
	// fills the band, and hedges wait as before. The account decides when a
	// hedge goes, never how many: the budget is the same.
	HedgeLateThreshold = 5

	// HedgeLateFactor is the late delay as a multiple of the delay.
	HedgeLateFactor = 1.5
)

// LateDelay is the delay of a request that the hedge account sends late
// (HedgeLateThreshold): HedgeLateFactor times the delay, in whole milliseconds,
// rounded up, since Envoy reads it from x-envoy-upstream-rq-per-try-timeout-ms.
func (h *Hedge) LateDelay() time.Duration {
	return (time.Duration(float64(h.Delay)*HedgeLateFactor) + time.Millisecond - 1).Truncate(time.Millisecond)
}

// RouteTimeout is the whole-request timeout of the hedged route.
//
// With hedge_on_per_try_timeout the delay (per_try_timeout) does not end an
// attempt: the slow attempt keeps running next to its hedges, and only the route
// timeout ends the request. Hedge n starts at most n*(LateDelay+HedgeBackoffMax)
// after the request (the hedge account may send it late), so
//
//	RouteTimeout = MaxHedges*(LateDelay+HedgeBackoffMax) + DefaultRouteTimeout
//
// gives the last hedge as long as an unhedged request gets. Hedging thus never
// cuts a request shorter than the unhedged route would (with a 20ms delay and
// one hedge: 15.04s).
func (h *Hedge) RouteTimeout() time.Duration {
	return time.Duration(h.MaxHedges)*(h.LateDelay()+HedgeBackoffMax) + DefaultRouteTimeout
}
