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

package estimate

import (
	"fmt"
	"math"
)

// A hedge sent at delay d answers no sooner than d plus the fastest answer,
// so it shortens only the requests slower than that. When far more requests
// than the budget are slow (a slow mode: one slow replica of three makes a
// third of the requests slow), the delay the budget allows lies inside or
// past the slow mode, and nearly every slow request has answered before a
// hedge could: hedging sends load and wins nothing (issue #26: with one
// replica of three 100 ms slower, the delay read 143 ms, 0.00% of requests
// were hedged, and the p99 stayed at 117 ms). outOfReach names that case.
const (
	// slowFactor: a request is slow when it takes this many times the
	// median or longer.
	slowFactor = 2.0
	// reachSlowShare: out of reach takes at least this many times the
	// budget's share of slow requests.
	reachSlowShare = 3.0
	// reachGainShare: and a hedge at the budget's delay that could shorten
	// at most this share of the budget's share of requests. Queueing spreads
	// latency without a gap: its tail falls off gradually past the delay, by
	// far less than this within one fast answer (HedgingHurts is its guard).
	reachGainShare = 0.1
	// reachMargin: the budget that hedges the slow share is this many
	// times it. Hedges also go to the fast mode's stragglers past the
	// delay, more of them on a busy machine, and the hedge account keeps
	// the hedges a few points below the budget. With one slow replica of
	// three in the local stack: at 35% (1.05 x a third) 36.6% of requests
	// ran past the delay and the hedged p99 stayed at 116 ms (p95 49 ms);
	// at 41% it fell to 53 ms idle, but beside two busy loops 43.5% ran past
	// the delay, 37.4% were hedged, and the p99 stayed at 116 ms.
	reachMargin = 1.45
	// maxBudget is the API's largest maxExtraLoadPercent, and minQuantile
	// just above its smallest auto.quantile.
	maxBudget   = 50
	minQuantile = 0.51
)

// outOfReach says whether the tail lies beyond what hedging within the
// budget can reach, and why: d is the delay read for tau, the share of
// requests allowed past it. Only when the budget sets tau: a quantile above
// 1 - budget is the user's choice of a later delay. The slow share is
// counted low and the share a hedge could shorten counted high, so that it
// errs towards hedging.
func outOfReach(r readings, d, tau float64, budgetPercent int32) (string, bool) {
	if tau < float64(budgetPercent)/100*(1-1e-9) {
		return "", false
	}
	c := r.cdf
	median := c.quantile(0.5)
	if median <= 0 || math.IsInf(median, 0) {
		return "", false
	}
	slow := c.beyond(slowFactor*median, r.edge)
	answered := d + c.fastest()
	gain := c.notProvenFaster(answered, r.edge)
	if slow < reachSlowShare*tau || gain > reachGainShare*tau {
		return "", false
	}
	// The budget that hedges the slow share (reachMargin).
	needed := math.Ceil(100*slow*reachMargin - 1e-9)
	cure := fmt.Sprintf("hedging it would take maxExtraLoadPercent %.0f or more, with auto.quantile at most %.2f",
		needed, math.Max(minQuantile, 1-needed/100))
	if needed > maxBudget {
		cure = fmt.Sprintf("hedging it would take a budget of %.0f%%, more than maxExtraLoadPercent allows (%d)", needed, maxBudget)
	}
	return fmt.Sprintf("%.1f%% of %.0f requests took %s or longer (%gx the median %s), and within the %d%% budget a hedge would go out after %s "+
		"and answer after %s at the earliest, later than all but %.2f%% of requests: no delay within the budget cuts this tail. "+
		"A slow share this large is often one slow endpoint (a slow replica); %s",
		100*slow, r.samples, roundUp(slowFactor*median), slowFactor, roundUp(median), budgetPercent, roundUp(d), roundUp(answered), 100*gain, cure), true
}
