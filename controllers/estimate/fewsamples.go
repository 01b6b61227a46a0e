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
	"time"
)

// The window's bounds in the CRD's validation.
const (
	minWindow = 15 * time.Second
	maxWindow = time.Hour
)

// fewSamplesHeadroom is how much more than minSamples a suggested window is
// sized for, at the rate read: a rate that wobbles does not fall just short.
const fewSamplesHeadroom = 1.2

// fewSamples says that span held fewer than minSamples requests, and what
// would change that at the rate it read: a window that holds minSamples,
// within the CRD's 1h, or else a lower minSamples or a static delay (#26:
// "TooFewSamples ... never derives" said nothing of what to change).
func fewSamples(samples float64, span time.Duration, minSamples int32) string {
	msg := fmt.Sprintf("%.0f requests in the last %s, fewer than minSamples %d", samples, promDuration(span), minSamples)
	if samples <= 0 || span <= 0 {
		return msg
	}
	rate := samples / span.Seconds()
	need := time.Duration(float64(minSamples) * fewSamplesHeadroom / rate * float64(time.Second))
	if need <= maxWindow {
		w := roundWindow(need)
		return fmt.Sprintf("%s: at %.3g requests/s a window of %s holds about %.0f: raise delay.auto.window to %s or more, or lower minSamples",
			msg, rate, promDuration(w), rate*w.Seconds(), promDuration(w))
	}
	most := int(math.Floor(rate * maxWindow.Seconds() / fewSamplesHeadroom))
	return fmt.Sprintf("%s: at %.3g requests/s even the longest window, 1h, holds about %.0f: lower minSamples to %d or less, or use a static delay",
		msg, rate, rate*maxWindow.Seconds(), max(most, 1))
}

// roundWindow rounds a window up to 15s steps below 2m and to whole minutes
// from there, within the CRD's bounds.
func roundWindow(d time.Duration) time.Duration {
	step := 15 * time.Second
	if d > 2*time.Minute {
		step = time.Minute
	}
	d = (d + step - 1).Truncate(step)
	return min(max(d, minWindow), maxWindow)
}
