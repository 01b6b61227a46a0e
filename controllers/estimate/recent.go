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

// How the delay comes down after a slow stretch.
//
// The span holds a window (or the time since the delay last changed). When
// the service was slower for part of it (a deploy, a noisy neighbour, the
// shift of make bench-tail) and is fast again, the span's quantile stays on
// the slow stretch until it leaves the span: a whole window with the delay
// past the fast mode, the slow requests hedged late or not at all (the shift
// scenario held 45-50ms for the 30s after its fast mode came back to 15ms).
//
// The last two evaluation intervals say sooner. Their own reading (the same
// rule as the span's, with the sampling allowance of their smaller count) is
// taken instead of the span's when it is lower by more than the deadband and
// the span before them was significantly slower at that delay: more requests
// past it than in the two intervals, by recentZ standard errors of the
// difference of two shares. The test is what keeps noise out: in a steady
// service the two intervals draw from the same distribution as the span,
// their smaller count allows them a lower reading more often than the span,
// and that alone is never a reason to move. Both intervals are needed: one
// interval may hold the end of the slow stretch (Envoy and Prometheus report
// seconds late). Only down: a slower service shows in the span at once, and
// the budget guard raises the delay.
const recentZ = 3.0

// recentReading is the delay the last two intervals ask for, the share of
// their n requests past it, and what to say about it, when they show that the
// span's slower part has passed; ok is false otherwise. spanD is the span's
// reading, limit the share of requests the delay may leave slower, z the
// sampling allowance's standard errors.
func recentReading(r readings, spanD, limit, z, censorAt float64, minSamples int32, deadbandPercent int32) (d, tail, n float64, why string, ok bool) {
	if r.cdf == nil || r.last == nil || r.earlier == nil {
		return 0, 0, 0, "", false
	}
	recent := r.last.plus(r.earlier)
	if recent == nil || recent.total() < float64(minSamples) {
		return 0, 0, 0, "", false
	}
	before := r.cdf.minus(recent)
	if before == nil || before.total() < float64(minSamples) {
		return 0, 0, 0, "", false
	}
	n = recent.total()
	d, tail, ok = recent.shortest(limit+z*math.Sqrt(limit*(1-limit)/n), r.edge)
	if !ok || d > censorAt*(1+1e-9) || d*(1+float64(deadbandPercent)/100) >= spanD {
		return 0, 0, 0, "", false
	}
	pRecent, pBefore := recent.beyond(d, r.edge), before.beyond(d, r.edge)
	m := before.total()
	pooled := (pRecent*n + pBefore*m) / (n + m)
	se := math.Sqrt(pooled * (1 - pooled) * (1/n + 1/m))
	if se <= 0 || pBefore-pRecent < recentZ*se {
		return 0, 0, 0, "", false
	}
	why = fmt.Sprintf("the last two evaluation intervals (%.0f requests) are faster than the rest of the span: %.2f%% of them took longer than %s, against %.2f%% of the %.0f before them",
		n, 100*pRecent, roundUp(d), 100*pBefore, m)
	return d, tail, n, why, true
}
