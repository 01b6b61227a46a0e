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
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"
)

// Arrivals say when a stream's requests leave.
type Arrivals int

const (
	// Constant sends request n (from 0) at n+1 intervals of 1/rate, as
	// vegeta's constant pacer does: one client at a steady rate, what the
	// generator and proxy benches measure.
	Constant Arrivals = iota
	// Independent spreads each phase's requests (rate x its length) at
	// independent, uniformly random moments within it: given their number,
	// the arrivals of a Poisson process, as many independent clients make.
	// The A/B's arms use it. Two arms on the same constant schedule leave in
	// pairs a few microseconds apart, and where the service queues
	// (saturation), which of a pair waits is settled by the clusters'
	// round-robin phase and the hedged route's extra filter, not by
	// hedging: with no hedge sent, one run's hedged p99 was 1.25x the
	// bypass p99 and another's 0.80x (docs/benchmarks.md).
	Independent
)

// schedule is the send time of each request of a stream, from the attack's
// start: phases are its settling and measured phases, in order.
func schedule(a Arrivals, name string, rate int, phases ...time.Duration) []time.Duration {
	var at []time.Duration
	var start time.Duration
	rng := rand.New(rand.NewPCG(streamSeed(name), 0x7a11c07))
	for _, length := range phases {
		n := int(int64(rate) * int64(length) / int64(time.Second))
		phase := make([]time.Duration, 0, n)
		for i := range n {
			switch a {
			case Independent:
				// In (start, start+length], as the constant schedule.
				phase = append(phase, start+length-time.Duration(rng.Int64N(int64(length))))
			default:
				phase = append(phase, start+time.Duration(i+1)*length/time.Duration(n))
			}
		}
		slices.Sort(phase)
		at = append(at, phase...)
		start += length
	}
	return at
}

// schedulePacer sends request n at at[n] after the attack's start, and stops
// after the last.
type schedulePacer struct {
	at   []time.Duration
	rate float64
}

// Pace implements vegeta's Pacer.
func (p schedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p.at)) {
		return 0, true
	}
	return p.at[hits] - elapsed, false
}

// Rate implements vegeta's Pacer: the mean rate.
func (p schedulePacer) Rate(time.Duration) float64 { return p.rate }

// streamSeed seeds a stream's random draws: a stream's draws are the same in
// every run, and another stream's are independent of them.
func streamSeed(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}
