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

import "github.com/tailcut/tailcut/controllers/plan"

// The delay read for the budget's quantile lets as many requests past it as
// the budget allows, give or take its noise (budgetSlack, selectZ). The hedge
// account gives a steady stream a little less than the budget (4.84% of a 5%
// budget over 30 s), so at that delay it rations: when a fast mode's stragglers
// run past the delay beside a slow mode (4% slow under a 5% budget, a busy
// machine), their hedges take the slow requests' place, and the slow requests
// it turns away are the tail. In CI the local stack read "4.83% of 4473
// requests took longer than 19ms (p95)", held 20.9ms with the account at
// 4.70-4.99% of 5%, and the hedged p99 stayed at the unhedged 116.7ms.
//
// So where a later delay within reach leaves the account room, the delay goes
// there: the shortest delay past which at most headroomShare of the budget's
// share of requests runs, when it lies no further than the late delay
// (plan.HedgeLateFactor x the delay read) and the histogram is exact there.
// Further out lies a slow mode as large as the budget (5% slow under 5%), which
// no delay below it leaves room for; the account's late tier rations that one.
const headroomShare = 0.9

// headroom reads that delay and its tail from the histogram of d's reading:
// ok when it lies past d and within reach. exactTo is the latency below which
// the histogram is exact (the delay in force plus the fastest answer; +Inf
// with hedging off).
func headroom(c *cdf, edge bucketEdge, d, tau, exactTo float64) (dh, tail float64, ok bool) {
	dh, tail, ok = c.shortest(headroomShare*tau, edge)
	if !ok || dh <= d || dh > d*plan.HedgeLateFactor*(1+1e-9) || dh > exactTo*(1+1e-9) {
		return 0, 0, false
	}
	return dh, tail, true
}
