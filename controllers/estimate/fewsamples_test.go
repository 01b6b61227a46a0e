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
	"testing"
	"time"
)

// The reason says what to change, by hand: 140 requests in 30s is 4.67/s;
// minSamples 200 with 20% headroom needs 240 requests, 51.4s at that rate,
// which rounds up to 1m (15s steps below 2m), where 4.67/s makes 280.
func TestFewSamplesSaysWhatToChange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		samples    float64
		span       time.Duration
		minSamples int32
		want       string
	}{
		{"#26's 5 requests/s in a 30s window", 140, 30 * time.Second, 200,
			"140 requests in the last 30s, fewer than minSamples 200: at 4.67 requests/s a window of 1m holds about 280: raise delay.auto.window to 1m or more, or lower minSamples"},
		// 1/s, minSamples 200: 240s, already whole minutes: 4m.
		{"1 request/s", 120, 2 * time.Minute, 200,
			"120 requests in the last 2m, fewer than minSamples 200: at 1 requests/s a window of 4m holds about 240: raise delay.auto.window to 4m or more, or lower minSamples"},
		// 0.05/s: 200 * 1.2 / 0.05 = 4,800s, over 1h, which holds 180:
		// minSamples 180 / 1.2 = 150 at most.
		{"beyond the longest window", 6, 2 * time.Minute, 200,
			"6 requests in the last 2m, fewer than minSamples 200: at 0.05 requests/s even the longest window, 1h, holds about 180: lower minSamples to 150 or less, or use a static delay"},
		{"no requests: nothing to scale", 0, 2 * time.Minute, 100,
			"0 requests in the last 2m, fewer than minSamples 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fewSamples(tc.samples, tc.span, tc.minSamples); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRoundWindow(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		time.Second:                  15 * time.Second, // the CRD's least
		51 * time.Second:             time.Minute,
		61 * time.Second:             75 * time.Second,
		2 * time.Minute:              2 * time.Minute,
		2*time.Minute + time.Second:  3 * time.Minute,
		59*time.Minute + time.Second: time.Hour,
		2 * time.Hour:                time.Hour, // the CRD's most
	} {
		if got := roundWindow(in); got != want {
			t.Errorf("roundWindow(%s) = %s, want %s", in, got, want)
		}
	}
}
