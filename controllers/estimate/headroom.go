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
	"math"

	"github.com/tailcut/tailcut/controllers/plan"
)

// The delay read for the budget's quantile lets as many requests past it as
// the budget allows, give or take its noise (budgetSlack, selectZ). The hedge
// account gives a steady stream a little less than the budget (4.96% of a 5%
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
// no delay below it leaves room for: there the delay goes where the fast
// mode's stragglers end (knee), and the account rations the slow mode.
//
// Neither read adds decide.go's delayMargin. The margin keeps a quantile read
// at the budget's share from landing inside the fast mode by noise; these two
// are read with an allowance of their own (a tenth of the budget's share), and
// every millisecond added to them is a millisecond added to every hedged
// request's answer (the local e2e's bimodal4 settled at 17ms, where it held
// 23.1ms with the margin).
const headroomShare = 0.9

// headroom reads that delay and its tail from the histogram of d's reading,
// d itself when d leaves the room already: ok when it lies within reach.
// exactTo is the latency below which the histogram is exact (the delay in
// force plus the fastest answer; +Inf with hedging off).
func headroom(c *cdf, edge bucketEdge, d, tau, exactTo float64) (dh, tail float64, ok bool) {
	dh, tail, ok = c.shortest(headroomShare*tau, edge)
	if !ok || dh > d*plan.HedgeLateFactor*(1+1e-9) || dh > exactTo*(1+1e-9) {
		return 0, 0, false
	}
	if dh < d {
		dh, tail = d, c.beyond(d, edge)
	}
	return dh, tail, true
}

// kneeShare: the knee is where at most this share of the budget's share of
// requests runs past the delay and is answered before the slow mode.
const kneeShare = 0.1

// knee reads the delay where a fast mode's stragglers end, when a slow mode
// as large as the budget lies past them (5% slow under a 5% budget). There no
// delay below the slow mode leaves the account room (headroom finds none),
// and a delay inside the fast mode's tail spends the slow requests' hedges on
// stragglers, while one past the knee only answers the slow requests later.
// slow is the share of requests past reach (the late delay, or where the
// hedges' answers begin when that is sooner): requests slow at any delay up
// to there. The knee is the shortest delay, d or later, past which the share
// of requests exceeds slow by at most kneeShare of the budget's share: the
// stragglers it leaves are that allowance, so no margin is added. ok is false
// when the slow mode is smaller than headroomShare of the budget's share (the
// headroom's case, or a smooth tail), or the knee lies past reach.
func knee(c *cdf, edge bucketEdge, d, tau, exactTo float64) (dk, stragglers float64, ok bool) {
	reach := math.Min(d*plan.HedgeLateFactor, exactTo)
	slow := c.beyond(reach, edge)
	if slow < headroomShare*tau {
		return 0, 0, false
	}
	dk, tail, ok := c.shortest(slow+kneeShare*tau, edge)
	if !ok || dk > reach*(1+1e-9) {
		return 0, 0, false
	}
	if dk < d {
		dk, tail = d, c.beyond(d, edge)
	}
	return dk, math.Max(0, tail-slow), true
}
