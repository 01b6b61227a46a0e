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

package localstack

import (
	"strings"
	"testing"

	"github.com/tailcut/tailcut/controllers/verify"
)

func fanOutRun(config string, p99, extra float64, reasons ...string) FanOutRun {
	var r Report
	r.UnhedgedArm = verify.ArmBypass
	r.Arms = map[string]verify.Arm{
		verify.ArmHedged: {Latency: verify.Latency{P99: p99}},
		verify.ArmBypass: {Latency: verify.Latency{P99: 116}},
	}
	r.ExtraLoad.Replicas = &verify.ReplicaLoad{Pct: extra}
	r.Pass, r.Reasons = len(reasons) == 0, reasons
	return FanOutRun{Config: config, Report: r}
}

// TestFanOutVerdictsJudgeEveryRun: a run that fails tailcut verify fails
// the benchmark whatever its tail, and a two-copy fan-out that does not beat
// one hedge misses.
func TestFanOutVerdictsJudgeEveryRun(t *testing.T) {
	auto := fanOutRun(FanOutAutoHedge, 40, 4)
	one := fanOutRun(FanOutOneCopy, 30, 95)
	for _, tc := range []struct {
		name   string
		runs   []FanOutRun
		missed bool
		want   string
	}{
		{"two copies cut it further", []FanOutRun{auto, one, fanOutRun(FanOutTwoCopies, 20, 190)}, false, "20.0 ms with two copies at once, 40.0 ms with one hedge at the auto delay (0.50x), for 48x the extra load: cuts it further"},
		{"two copies no better", []FanOutRun{auto, one, fanOutRun(FanOutTwoCopies, 40, 190)}, true, "MISSES: a fan-out that does not beat one hedge"},
		{"a POST duplicated", []FanOutRun{auto, one, fanOutRun(FanOutTwoCopies, 20, 190, "3 POSTs were duplicated (600 sent, 603 executed)")}, true,
			FanOutTwoCopies + ": FAILS tailcut verify: 3 POSTs were duplicated"},
		{"the auto run over its budget", []FanOutRun{fanOutRun(FanOutAutoHedge, 40, 6, "extra load 6.00% (counted at the replicas) is above the 5% budget"), one, fanOutRun(FanOutTwoCopies, 20, 190)}, true,
			FanOutAutoHedge + ": FAILS tailcut verify: extra load 6.00%"},
		{"a configuration missing", []FanOutRun{auto, one}, true, "not compared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, missed := FanOutVerdicts(tc.runs)
			text := strings.Join(lines, "\n")
			if missed != tc.missed || !strings.Contains(text, tc.want) {
				t.Errorf("missed %v, verdicts:\n%s\nwant missed %v and %q", missed, text, tc.missed, tc.want)
			}
		})
	}
}
