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
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/verify"
)

func sampleReport() *verify.Report {
	arm := func(p50, p95, p99, p999 float64) verify.Arm {
		return verify.Arm{Latency: verify.Latency{Count: 9000, P50: p50, P90: p50 + 1, P95: p95, P99: p99, P999: p999, Max: p999 + 10,
			Percentiles: map[string]float64{"50": p50, "90": p50 + 1, "95": p95, "99": p99, "99.9": p999}}, Scheduled: 9000, Sent: 9000, AchievedRate: 150}
	}
	budget := 5.0
	return &verify.Report{
		URL: "http://127.0.0.1:19000/", Host: "workload.demo", Scenario: "bimodal", UnhedgedArm: verify.ArmBypass, RatePerArm: 150,
		Duration: "1m0s", Settle: "0s", Arms: map[string]verify.Arm{verify.ArmBypass: arm(16.1, 110, 117, 119), verify.ArmHedged: arm(16.3, 34, 38, 117)},
		Ratio:     map[string]float64{"p50": 1.01, "p90": 1.01, "p95": 0.31, "p99": 0.32, "p999": 0.98},
		ExtraLoad: verify.ExtraLoad{Envoy: &verify.EnvoyLoad{Pct: 4.8, Requests: 9000, Hedges: 432}},
		BudgetPct: &budget, MaxP99Ratio: 0.5, Pass: true, Reasons: []string{},
	}
}

func TestReportKeepsTheDocumentedShape(t *testing.T) {
	policy := &tailcutv1alpha1.HedgePolicy{Status: tailcutv1alpha1.HedgePolicyStatus{
		EffectiveDelay: &metav1.Duration{Duration: 17500 * time.Microsecond}, DelaySource: tailcutv1alpha1.DelaySourcePrometheus,
		DelayReason: "p95 of bypass traffic",
	}}
	r := NewReport(sampleReport(), policy)
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"arms.bypass.count", "arms.bypass.p50_ms", "arms.bypass.p90_ms", "arms.bypass.p95_ms", "arms.bypass.p99_ms",
		"arms.bypass.p999_ms", "arms.bypass.max_ms", "arms.bypass.errors", "arms.bypass.send_lag.p99_ms", "arms.bypass.achieved_rate",
		"arms.hedged.p99_ms", "ratio.p50", "ratio.p99", "ratio.p999", "extra_load.envoy.pct", "budget_pct", "delay_ms", "delay_reason",
		"scenario", "generator", "pass", "reasons"} {
		if Get(got, k) == nil {
			t.Errorf("report.json lacks %s", k)
		}
	}
	if Float(got, "delay_ms") != 17.5 || Float(got, "budget_pct") != 5 || Float(got, "arms.hedged.p99_ms") != 38 {
		t.Errorf("delay_ms %v budget_pct %v hedged p99 %v", Float(got, "delay_ms"), Float(got, "budget_pct"), Float(got, "arms.hedged.p99_ms"))
	}
	svg, err := os.ReadFile(filepath.Join(dir, "report.svg"))
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("hedged")) {
		t.Errorf("report.svg is not a plot with a hedged series (err %v, %d bytes)", err, len(svg))
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(html), "<svg") || !strings.Contains(string(html), "17.5 ms") || !strings.Contains(string(html), "(budget 5%)") {
		t.Errorf("report.html does not embed the plot and the delay")
	}
	var table bytes.Buffer
	r.PrintTable(&table)
	for _, want := range []string{"bypass", "hedged", "117.0", "38.0", "0.32", "17.5 ms", "4.80% (432 hedges for 9000 requests; budget 5%)", "verdict: PASS"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestUnknownScenarioNamesTheChoices(t *testing.T) {
	if _, err := LookupScenario("spiky"); err == nil || !strings.Contains(err.Error(), "saturation") {
		t.Errorf("LookupScenario(spiky) = %v", err)
	}
}
