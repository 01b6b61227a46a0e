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

package xds

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
)

// accountRun is what one run through the hedge account counted.
type accountRun struct {
	sent, ok, attemptHeaders int
	// hedges reached the upstream; early ones came sooner than earlyBelow
	// after their first attempt.
	hedges, early int
}

// The account's run hedges at accountDelay, or late at 150 ms. The two are
// 50 ms apart, so that a hedge's lateness reads well above the noise of the
// upstream's clock: with a 20 ms delay (late: 30 ms) and the line at 25 ms,
// a CI run that tested four packages at once on two cores saw one hedge
// arrive 24 ms after its first attempt, while Envoy's own clock
// (x-envoy-expected-rq-timeout-ms) put every hedge of such runs at 28 ms or
// more: the first attempt's arrival had waited on the scheduler.
const accountDelay = 100 * time.Millisecond

// earlyBelow is halfway between the delay and the late delay.
var earlyBelow = (accountDelay + (&plan.Hedge{Delay: accountDelay}).LateDelay()) / 2

// runAccount sends 50 GETs a second for 20 s through an accountDelay hedge with a 5%
// budget: one Envoy worker, one account, and the run fits in one of the
// account's windows (plan.HedgeWindow). Every slowEvery-th request goes to
// /slow (300 ms), the rest to / (fast).
func runAccount(t *testing.T, slowEvery int) accountRun {
	t.Helper()
	const rate, length = 50, 20 * time.Second
	if length >= plan.HedgeWindow {
		t.Fatalf("the run (%s) must fit in one window of the account (%s)", length, plan.HedgeWindow)
	}
	up := newAttemptLog(t)
	listenPort := servePlan(t, up, func(p *plan.RoutePlan) {
		p.Hedge.Delay = accountDelay
		p.Budget = plan.Budget{Percent: 5, MinConcurrency: 3}
	})
	client := newLoadClient()
	var (
		mu  sync.Mutex
		run accountRun
	)
	paced(rate, length, func(i int) {
		path := "/"
		if i%slowEvery == 0 {
			path = "/slow"
		}
		resp, err := getWeb(client, listenPort, path, fmt.Sprintf("rate-%d", i))
		mu.Lock()
		defer mu.Unlock()
		run.sent++
		if err != nil {
			return
		}
		if resp.StatusCode == http.StatusOK {
			run.ok++
		}
		if resp.Header.Get("x-envoy-attempt-count") != "" {
			run.attemptHeaders++
		}
	})
	time.Sleep(500 * time.Millisecond) // the last hedges arrive

	up.mu.Lock()
	defer up.mu.Unlock()
	for id, at := range up.arrived {
		if !strings.HasPrefix(id, "rate-") || len(at) < 2 {
			continue
		}
		run.hedges += len(at) - 1
		// Envoy sends the hedge after the per-try timeout plus a back-off
		// of up to 1 ms.
		if at[1].Sub(at[0]) < earlyBelow {
			run.early++
		}
	}
	if run.ok != run.sent {
		t.Errorf("%d of %d requests got a 200", run.ok, run.sent)
	}
	if run.attemptHeaders > 0 {
		t.Errorf("%d responses carried x-envoy-attempt-count to the client; the account removes it", run.attemptHeaders)
	}
	for h := range up.leaked {
		t.Errorf("a header reached the upstream: %s", h)
	}
	// The account allows 5% of the requests of its window, and spends what
	// it earns: a cap that turned hedging off would pass the first check.
	most := 0.05 * float64(run.sent)
	t.Logf("%d requests, one in %d slow: %d hedges (%.1f%%), at most %.0f allowed; %d sooner than %s",
		run.sent, slowEvery, run.hedges, 100*float64(run.hedges)/float64(run.sent), most, run.early, earlyBelow)
	if float64(run.hedges) > most {
		t.Errorf("%d hedges for %d requests, want at most %.0f: the 5%% budget", run.hedges, run.sent, most)
	}
	if least := most - 5; float64(run.hedges) < least {
		t.Errorf("%d hedges for %d requests, want at least %.0f: the account should spend its share (unhedged answers give their commitments back)", run.hedges, run.sent, least)
	}
	return run
}

// TestHedgeAccountCapsTheRate is the data-path half of #14's brownout: every
// request is slow (every replica slow), so every request wants a hedge.
// Without the account (the route's metadata removed) the same run, with a
// 1 ms delay, sent 1,000 hedges for 1,000 requests: Envoy's retry_budget did
// not hold them back, as a retry holds its place in the budget only while it
// waits out its back-off (1 ms on a hedged route), not while it runs. The
// account allows at most the budget's share of the requests of its window, 5%
// of 1,000: 50 hedges, none for requests in flight beyond it. With every
// request slow, a request never leaves the late threshold behind, so every
// hedge is late: 150 ms (1.5 x 100 ms) after its first attempt, not 100.
func TestHedgeAccountCapsTheRate(t *testing.T) {
	if run := runAccount(t, 1); run.early > 0 {
		t.Errorf("%d hedges came sooner than %s after their first attempt; every hedge should be late (%s)", run.early, earlyBelow, (&plan.Hedge{Delay: accountDelay}).LateDelay())
	}
}

// TestHedgeAccountGivesBackUnusedHedges: one request in ten is slow, more
// than the 5% budget can hedge. A request commits a hedge when it arrives and
// gives it back when it is answered unhedged, so the fast nine in ten leave
// the budget to the slow ones: 5% of 1,000 requests, 50 hedges, all of slow
// requests. With the give-back removed from the Lua, the commitments fell on
// fast requests and 0 hedges were sent.
func TestHedgeAccountGivesBackUnusedHedges(t *testing.T) {
	runAccount(t, 10)
}
