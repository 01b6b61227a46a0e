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
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
)

// TestHedgeAccountCapsTheRate is the data-path half of #14's brownout: an
// upstream where every attempt takes 300 ms (every replica slow), a 20 ms
// delay, so every request wants a hedge, at 50 requests a second for 20 s.
// Without the account (the route's metadata removed) the same run sent 1,000
// hedges for 1,000 requests: Envoy's retry_budget did not hold them back, as
// a retry holds its place in the budget only while it waits out its back-off
// (1 ms on a hedged route), not while it runs. The run fits in one of the
// account's windows, so the account allows at most the budget's share of the
// requests, 5% of 1,000: 50 hedges, none for requests in flight beyond it.
// With every request slow the account never holds more than its late
// reserve, so every hedge is late: 30 ms (1.5 x 20 ms) after its first
// attempt, not 20.
func TestHedgeAccountCapsTheRate(t *testing.T) {
	up := newAttemptLog(t)
	budget := plan.Budget{Percent: 5, MinConcurrency: 3}
	listenPort := servePlan(t, up, func(p *plan.RoutePlan) {
		p.Hedge.Delay = 20 * time.Millisecond
		p.Budget = budget
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	const rate, length = 50, 20 * time.Second
	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		sent, ok       int
		attemptHeaders int
	)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for start, i := time.Now(), 0; time.Since(start) < length; i++ {
		<-tick.C
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/slow", listenPort), nil)
			if err != nil {
				panic(err)
			}
			req.Host = "web.e2e"
			req.Header.Set("x-test-id", fmt.Sprintf("rate-%d", i))
			resp, err := client.Do(req)
			mu.Lock()
			defer mu.Unlock()
			sent++
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok++
			}
			if resp.Header.Get("x-envoy-attempt-count") != "" {
				attemptHeaders++
			}
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the last hedges arrive

	up.mu.Lock()
	defer up.mu.Unlock()
	attempts, onTime := 0, 0
	for id, n := range up.attempts {
		if !strings.HasPrefix(id, "rate-") {
			continue
		}
		attempts += n
		// Envoy sends the hedge after the per-try timeout plus a back-off
		// of up to 1 ms; scheduling on a busy machine adds a few more.
		if at := up.arrived[id]; len(at) == 2 && at[1].Sub(at[0]) < 27*time.Millisecond {
			onTime++
		}
	}
	extra := attempts - sent
	// One Envoy worker: one account, and the run is shorter than its window.
	if length >= plan.HedgeWindow {
		t.Fatalf("the run (%s) must fit in one window of the account (%s)", length, plan.HedgeWindow)
	}
	most := float64(budget.Percent) / 100 * float64(sent)
	t.Logf("%d requests, %d attempts at the upstream: %d hedges (%.1f%%), at most %.0f allowed (%.1f%%)", sent, attempts, extra, 100*float64(extra)/float64(sent), most, 100*most/float64(sent))
	if ok != sent {
		t.Errorf("%d of %d requests got a 200", ok, sent)
	}
	if float64(extra) > most {
		t.Errorf("%d hedges for %d requests, want at most %.0f: the %d%% budget", extra, sent, most, budget.Percent)
	}
	// The account spends what it earns: a cap that turned hedging off would
	// also pass the bound above.
	if least := most - 5; float64(extra) < least {
		t.Errorf("%d hedges for %d requests, want at least %.0f: the account should spend its share", extra, sent, least)
	}
	if onTime > 0 {
		t.Errorf("%d hedges came less than 27 ms after their first attempt; every hedge should be late (30 ms) once the account holds less than its reserve", onTime)
	}
	if attemptHeaders > 0 {
		t.Errorf("%d responses carried x-envoy-attempt-count to the client; the account removes it", attemptHeaders)
	}
	for h := range up.leaked {
		t.Errorf("a header reached the upstream: %s", h)
	}
}
