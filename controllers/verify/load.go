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
	"math"
	"net/http"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

const vegetaModule = "github.com/tsenart/vegeta/v12"

// Generator names the load generator and its version, as linked.
func Generator() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == vegetaModule {
				return "vegeta " + m.Version
			}
		}
	}
	return "vegeta (version unknown)"
}

// A stream is one stream of requests at a mean rate: an arm of the A/B, or
// the POSTs. Every stream starts at the same instant and runs settle +
// duration.
type stream struct {
	name     string
	rate     int
	arrivals Arrivals
	targets  []vegetaTarget
	keys     *Keys // nil: no key
}

// Limits are the generator's own limits. A generator that runs out of
// connections or workers does not fail: it sends late, which is why every run
// proves its rate (see Lag).
type Limits struct {
	// Connections is the number of idle keep-alive connections kept per host.
	Connections int
	// MaxConnections caps the connections per host (0: no cap). A cap turns a
	// slow server into a lower rate: the run then reports late sends.
	MaxConnections int
	// Workers is the number of workers each stream starts with, MaxWorkers the
	// most it grows to (0: no cap). vegeta starts a worker whenever every
	// worker is waiting for an answer, so an open model needs no cap.
	Workers, MaxWorkers uint64
	// Timeout is how long one request may take before it counts as failed.
	Timeout time.Duration
}

// DefaultLimits keep the open model open: no cap on connections or workers.
func DefaultLimits() Limits {
	return Limits{Connections: vegeta.DefaultConnections, Workers: vegeta.DefaultWorkers, Timeout: 10 * time.Second}
}

// sample is one request's outcome, with its place in the schedule.
type sample struct {
	scheduled time.Duration // since the run's start (schedule)
	lag       time.Duration // sent this long after its scheduled time
	latency   time.Duration
	ok        bool
	err       string
}

// attack runs every stream for settle+duration at once and returns each
// stream's samples, in the order of their schedule. logf, when not nil, gets
// a progress line every progressEvery.
func attack(ctx context.Context, streams []stream, settle, duration time.Duration, lim Limits, logf func(string, ...any)) map[string][]sample {
	out := make(map[string][]sample, len(streams))
	var mu sync.Mutex
	var wg sync.WaitGroup
	prog := newProgress(streams)
	if logf != nil {
		start := time.Now()
		ticker := time.NewTicker(progressEvery)
		done := make(chan struct{})
		defer func() { ticker.Stop(); close(done) }()
		go func() {
			for {
				select {
				case <-ticker.C:
					logf("tailcut verify: %s: %s", time.Since(start).Round(time.Second), prog.line())
				case <-done:
					return
				}
			}
		}()
	}
	for _, st := range streams {
		atk := vegeta.NewAttacker(
			vegeta.Connections(lim.Connections),
			vegeta.MaxConnections(lim.MaxConnections),
			vegeta.Workers(lim.Workers),
			vegeta.MaxWorkers(maxWorkers(lim.MaxWorkers)),
			vegeta.Timeout(lim.Timeout),
			vegeta.Redirects(vegeta.NoFollow),
			vegeta.MaxBody(0),
			vegeta.KeepAlive(true),
		)
		at := schedule(st.arrivals, st.name, st.rate, settle, duration)
		targeter := vegeta.NewStaticTargeter(st.targets...)
		if st.keys != nil {
			targeter = st.keys.keyed(targeter, int64(streamSeed(st.name+"/keys")))
		}
		pacer := schedulePacer{at: at, rate: float64(st.rate)}
		wg.Go(func() {
			// vegeta takes its own start a moment after this one, so the lag
			// below is an upper bound by that moment (microseconds).
			began := time.Now()
			results := atk.Attack(targeter, pacer, settle+duration, st.name)
			stop := context.AfterFunc(ctx, func() { atk.Stop() })
			defer stop()
			samples := make([]sample, 0, int(float64(st.rate)*(settle+duration).Seconds())+1)
			for r := range results {
				scheduled := at[min(r.Seq, uint64(len(at)-1))]
				s := sample{
					scheduled: scheduled,
					lag:       r.Timestamp.Sub(began) - scheduled,
					latency:   r.Latency,
					ok:        r.Error == "" && r.Code >= 200 && r.Code < 400,
					err:       describe(r),
				}
				prog.add(st.name, s)
				samples = append(samples, s)
			}
			// Answers arrive in the order they finish; the schedule is by seq.
			sort.Slice(samples, func(i, j int) bool { return samples[i].scheduled < samples[j].scheduled })
			mu.Lock()
			out[st.name] = samples
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func maxWorkers(n uint64) uint64 {
	if n == 0 {
		return vegeta.DefaultMaxWorkers
	}
	return n
}

func describe(r *vegeta.Result) string {
	switch {
	case r.Error != "" && r.Code == 0:
		return r.Error
	case r.Code < 200 || r.Code >= 400:
		return fmt.Sprintf("HTTP %d", r.Code)
	}
	return ""
}

type vegetaTarget = vegeta.Target

// get is a GET of url with the given headers.
func get(url string, header http.Header) vegetaTarget {
	return vegetaTarget{Method: http.MethodGet, URL: url, Header: header}
}

// Latency is one stream's client-side latency over the measured phase, in
// milliseconds. The quantiles are exact (nearest rank over every sample), not
// estimated: a p99.9 from 10k samples is the 10th slowest request.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	// Percentiles holds more points of the same curve, for plots.
	Percentiles map[string]float64 `json:"percentiles_ms,omitempty"`
}

// plotPercentiles are the points kept for plots, besides the named ones.
var plotPercentiles = []float64{10, 25, 50, 75, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95}

func latencyOf(ss []sample) Latency {
	ms := make([]float64, 0, len(ss))
	for _, s := range ss {
		ms = append(ms, float64(s.latency.Microseconds())/1000)
	}
	sort.Float64s(ms)
	l := Latency{Count: len(ms), P50: rank(ms, 50), P90: rank(ms, 90), P95: rank(ms, 95), P99: rank(ms, 99), P999: rank(ms, 99.9), Max: rank(ms, 100)}
	if len(ms) > 0 {
		l.Percentiles = map[string]float64{}
		for _, p := range plotPercentiles {
			l.Percentiles[fmt.Sprint(p)] = rank(ms, p)
		}
	}
	return l
}

// rank is the nearest-rank percentile p of sorted values: the smallest value
// that at least p% of the values are at or below.
func rank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	// p/100*n in floating point can land a hair above a whole rank
	// (99.9/100*1000 = 999.0000000000001), which would skip a rank.
	i := int(math.Ceil(p/100*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Lag is how far one stream's sends fell behind their schedule: the proof that
// the generator kept the rate it reports.
type Lag struct {
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// Late counts the requests sent LateAfter or more behind their schedule.
	Late int `json:"late"`
}

func lagOf(ss []sample, lateAfter time.Duration) Lag {
	ms := make([]float64, 0, len(ss))
	var l Lag
	for _, s := range ss {
		ms = append(ms, float64(s.lag.Microseconds())/1000)
		if s.lag >= lateAfter {
			l.Late++
		}
	}
	sort.Float64s(ms)
	l.P99MS, l.MaxMS = rank(ms, 99), rank(ms, 100)
	return l
}

// errorsOf counts the failed requests, and keeps a few of their reasons.
func errorsOf(ss []sample) (int, map[string]int) {
	n := 0
	kinds := map[string]int{}
	for _, s := range ss {
		if s.ok {
			continue
		}
		n++
		if _, seen := kinds[s.err]; seen || len(kinds) < 5 {
			kinds[s.err]++
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, kinds
}

// Stream sends GETs of url, with header, at rate for duration, alone, and
// reports them as an arm: what `make bench-loadgen` measures the generator
// with, and `make bench-proxy` the proxy.
func Stream(ctx context.Context, url string, header http.Header, rate int, duration time.Duration, lim Limits, lateAfter time.Duration) Arm {
	samples := attack(ctx, []stream{{name: "load", rate: rate, targets: []vegetaTarget{get(url, header)}}}, 0, duration, lim, nil)
	return armOf(samples["load"], rate, 0, duration, lateAfter)
}

// split cuts a stream's samples at the end of the settling phase, by their
// place in the schedule (not by when they happened to be sent). Hits fall at
// the end of each interval, so the settling phase is (0, settle].
func split(ss []sample, settle time.Duration) (settling, measured []sample) {
	for i, s := range ss {
		if s.scheduled > settle {
			return ss[:i], ss[i:]
		}
	}
	return ss, nil
}
