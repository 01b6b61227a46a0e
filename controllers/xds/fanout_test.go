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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// fanOutRun is what one run through a fan-out route counted at the upstream.
type fanOutRun struct {
	gets, posts int
	// copies are the GETs' attempts beyond the first; spread is the longest
	// time from a GET's first attempt to its last, on Envoy's clock.
	copies int
	spread time.Duration
	// byAttempts counts GETs by their number of attempts.
	byAttempts map[int]int
	// postExecutions are the POSTs' attempts at the upstream.
	postExecutions int
}

// runFanOut sends 20 GETs and 5 POSTs a second for 10 s to SlowPath through
// a route with delay.mode FanOut's delay, maxHedges hedges and a budget of
// budget percent. Every attempt takes harness.SlowFor (300 ms), so every
// copy the account allows is sent while the first attempt still runs.
func runFanOut(t *testing.T, maxHedges, budget int32) fanOutRun {
	t.Helper()
	up := harness.NewUpstream(t, 0)
	listenPort := servePlan(t, up, func(p *plan.RoutePlan) {
		p.Hedge.Delay = tailcutv1alpha1.FanOutDelay
		p.Hedge.MaxHedges = maxHedges
		p.Budget = plan.Budget{Percent: budget, MinConcurrency: 3}
		p.Match.Methods = []string{"GET", "HEAD"}
	})
	client := newLoadClient()
	var (
		mu     sync.Mutex
		run    = fanOutRun{byAttempts: map[int]int{}}
		failed []string
	)
	paced(25, 10*time.Second, func(i int) {
		method := http.MethodGet
		if i%5 == 4 {
			method = http.MethodPost
		}
		req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", listenPort, harness.SlowPath), strings.NewReader("body"))
		if err != nil {
			panic(err)
		}
		req.Host = "web.e2e"
		req.Header.Set("x-test-id", fmt.Sprintf("%s-%d", method, i))
		resp, err := client.Do(req)
		mu.Lock()
		defer mu.Unlock()
		if method == http.MethodGet {
			run.gets++
		} else {
			run.posts++
		}
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed = append(failed, resp.Status)
		}
	})
	time.Sleep(200 * time.Millisecond)
	if len(failed) > 0 {
		t.Errorf("%d requests failed, the first: %s", len(failed), failed[0])
	}
	timeLeft := up.TimeLeft()
	for id, at := range up.Arrivals() {
		switch {
		case strings.HasPrefix(id, "GET-"):
			run.byAttempts[len(at)]++
			run.copies += len(at) - 1
			left := timeLeft[id]
			if len(left) != len(at) {
				t.Errorf("%s: %d attempts arrived, %d with x-envoy-expected-rq-timeout-ms", id, len(at), len(left))
				continue
			}
			run.spread = max(run.spread, slices.Max(left)-slices.Min(left))
		case strings.HasPrefix(id, "POST-"):
			run.postExecutions += len(at)
		}
	}
	t.Logf("maxHedges %d, budget %d%%: %d GETs by attempts %v (%d copies, %.1f%% of the GETs), the last copy at most %s after the first attempt; %d POSTs executed %d times",
		maxHedges, budget, run.gets, run.byAttempts, run.copies, 100*float64(run.copies)/float64(run.gets), run.spread, run.posts, run.postExecutions)
	if run.postExecutions != run.posts {
		t.Errorf("%d POSTs executed %d times at the upstream, want once each: a fan-out copies GET and HEAD only", run.posts, run.postExecutions)
	}
	// The copies leave while the first attempt runs: long before it answers.
	if run.spread >= harness.SlowFor/2 {
		t.Errorf("a GET's last copy left %s after its first attempt; a fan-out sends them at once, well within the first attempt's %s", run.spread, harness.SlowFor)
	}
	return run
}

// TestFanOutSendsEveryCopyAtOnce (#26, fan-out): with delay.mode FanOut,
// two hedges and a 200% budget, every GET reaches three attempts at once,
// and no POST is copied.
func TestFanOutSendsEveryCopyAtOnce(t *testing.T) {
	run := runFanOut(t, 2, 200)
	if run.byAttempts[3] != run.gets {
		t.Errorf("GETs by attempts %v, want all %d with 3", run.byAttempts, run.gets)
	}
}

// TestFanOutKeepsItsBudget: a 100% budget with two hedges pays for one
// copy per hedged request. The account's base is the hedged route's
// requests (the POSTs take the unhedged route), and it hands out the budget
// as requests arrive, so each GET gets one copy, and the total stays within
// 100% of the GETs while spending it.
func TestFanOutKeepsItsBudget(t *testing.T) {
	run := runFanOut(t, 2, 100)
	if run.copies > run.gets {
		t.Errorf("%d copies for %d GETs: above the 100%% budget", run.copies, run.gets)
	}
	if least := run.gets - run.gets/20; run.copies < least {
		t.Errorf("%d copies for %d GETs, want at least %d: the account should spend its budget", run.copies, run.gets, least)
	}
}
