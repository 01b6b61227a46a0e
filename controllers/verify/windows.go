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

package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
)

// The hedge account keeps the budget over every stretch of its window
// (plan.HedgeWindow) or more, not only over a whole run: a run can spend 4%
// overall and 10% in one of its halves. While the load runs, Envoy's admin is
// read every windowStep (or, through Prometheus, each proxy's scrapes are read
// after the run), and worstStretch finds the stretch between two readings, a
// window long or longer, nearest to going over the budget.

// windowStep is how often Envoy's counters are read during a run.
const windowStep = time.Second

// reading is the counters at one moment.
type reading struct {
	at time.Time
	c  counts
}

// readEvery reads src every step until ctx ends and then sends what it read.
// A failed read is skipped: the stretches around it are longer.
func readEvery(ctx context.Context, src counterSource, step time.Duration) <-chan []reading {
	out := make(chan []reading, 1)
	go func() {
		var got []reading
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				out <- got
				return
			case <-t.C:
				if c, err := src.read(ctx); err == nil {
					got = append(got, reading{at: time.Now(), c: c})
				}
			}
		}
	}()
	return out
}

// runWorstStretch finds a run's worst stretch in what src read: the admin's
// readings taken every second during the run (every), between the readings
// before and after it, or each proxy's scrapes stored in Prometheus. When it
// finds none it says why.
func runWorstStretch(ctx context.Context, src counterSource, every <-chan []reading, started time.Time, before, after counts, hedged, unhedged string) (*StretchLoad, string) {
	if prom, ok := src.(promSource); ok {
		byProxy, err := prom.readingsSince(ctx, started)
		if err != nil {
			return nil, err.Error()
		}
		if worst := worstOfProxies(byProxy, started, plan.HedgeWindow, hedged, unhedged); worst != nil {
			return worst, ""
		}
		return nil, fmt.Sprintf("no proxy of %d was scraped twice %s or more apart during the run", len(byProxy), plan.HedgeWindow)
	}
	if every == nil {
		return nil, "the counters were not read during the run"
	}
	rs := append(append([]reading{{at: started, c: before}}, <-every...), reading{at: time.Now(), c: after})
	if worst := worstStretch(rs, started, plan.HedgeWindow, hedged, unhedged); worst != nil {
		return worst, ""
	}
	return nil, "the run was shorter"
}

// worstStretch is the stretch of window or longer between two of the readings
// (in time order) nearest to going over any budget: the most hedges per
// request allowed (AllowedHedges), not per request, since a shorter stretch
// is allowed more per request; nil when the readings span less than a window.
// Its start is counted from origin, the start of the run.
func worstStretch(rs []reading, origin time.Time, window time.Duration, hedged, unhedged string) *StretchLoad {
	var worst *StretchLoad
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			span := rs[j].at.Sub(rs[i].at)
			if span < window {
				continue
			}
			e := envoyLoad(increase(rs[i].c, rs[j].c), "", hedged, unhedged)
			if e.Requests <= 0 {
				continue
			}
			s := &StretchLoad{
				StartS: rs[i].at.Sub(origin).Seconds(), Seconds: span.Seconds(),
				Requests: e.Requests, Hedges: e.Hedges, Pct: e.Pct,
			}
			if s.nearerToTheBudget(worst) {
				worst = s
			}
		}
	}
	if worst != nil {
		worst.Window = window.String()
		worst.Readings = len(rs)
	}
	return worst
}

// worstOfProxies is the worst stretch of any one proxy, each read at its own
// scrapes (promSource.readingsSince), named by its proxy; nil when no proxy
// has two readings a window apart.
func worstOfProxies(byProxy map[string][]reading, origin time.Time, window time.Duration, hedged, unhedged string) *StretchLoad {
	var worst *StretchLoad
	// By name, so that of two proxies at the same load the report names
	// the same one every time.
	for _, proxy := range slices.Sorted(maps.Keys(byProxy)) {
		if s := worstStretch(byProxy[proxy], origin, window, hedged, unhedged); s.nearerToTheBudget(worst) {
			s.Proxy = proxy
			worst = s
		}
	}
	return worst
}

// nearerToTheBudget tells whether s holds more hedges per allowed request
// than other (which may be nil).
func (s *StretchLoad) nearerToTheBudget(other *StretchLoad) bool {
	if s == nil {
		return false
	}
	return other == nil || s.Hedges/s.allowedRequests() > other.Hedges/other.allowedRequests()
}

// AllowedHedges is the most hedges a stretch read between two readings may
// hold within a budget of pct: the account counts whole seconds by the
// arrival of the request, and the stretch's ends fall inside a second, so it
// may take in the hedges of one second more at each end, at the stretch's
// mean rate.
func (s *StretchLoad) AllowedHedges(pct float64) float64 {
	return pct / 100 * s.allowedRequests()
}

// allowedRequests is the stretch's requests and a second's more at each end,
// at its mean rate: what the budget is a share of.
func (s *StretchLoad) allowedRequests() float64 {
	return s.Requests + 2*s.Requests/s.Seconds
}

// worst is the load's worst stretch, nil when none was read.
func (e *EnvoyLoad) worst() *StretchLoad {
	if e == nil {
		return nil
	}
	return e.Worst
}
