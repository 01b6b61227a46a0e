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
)

const sampleSummary = `{
 "arms": {
  "bypass": {"count": 9000, "p50_ms": 16.1, "p90_ms": 17, "p95_ms": 110, "p99_ms": 117, "p999_ms": 119, "max_ms": 130, "error_rate": 0,
             "percentiles_ms": {"50": 16.1, "90": 17, "95": 110, "99": 117, "99.9": 119}},
  "hedged": {"count": 9000, "p50_ms": 16.3, "p90_ms": 17.2, "p95_ms": 34, "p99_ms": 38, "p999_ms": 117, "max_ms": 121, "error_rate": 0,
             "percentiles_ms": {"50": 16.3, "90": 17.2, "95": 34, "99": 38, "99.9": 117}}
 },
 "ratio": {"p50": 1.01, "p90": 1.01, "p95": 0.31, "p99": 0.32, "p999": 0.98},
 "extra_load_pct": 4.8, "dropped_iterations": 0, "scenario": "bimodal", "rate_per_arm": 150, "duration": "60s",
 "verdict": {"pass": true, "reasons": []}
}`

func TestReportKeepsTheDocumentedShape(t *testing.T) {
	var summary map[string]any
	if err := json.Unmarshal([]byte(sampleSummary), &summary); err != nil {
		t.Fatal(err)
	}
	policy := &tailcutv1alpha1.HedgePolicy{Status: tailcutv1alpha1.HedgePolicyStatus{
		EffectiveDelay: &metav1.Duration{Duration: 17500 * time.Microsecond}, DelaySource: tailcutv1alpha1.DelaySourcePrometheus,
		DelayReason: "p95 of bypass traffic",
	}}
	r, err := NewReport(summary, policy)
	if err != nil {
		t.Fatal(err)
	}
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
		"arms.bypass.p999_ms", "arms.bypass.max_ms", "arms.bypass.error_rate", "arms.hedged.p99_ms", "ratio.p50", "ratio.p99", "ratio.p999",
		"extra_load_pct", "budget_pct", "delay_ms", "delay_reason", "dropped_iterations", "scenario"} {
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
	if !strings.Contains(string(html), "<svg") || !strings.Contains(string(html), "17.5 ms") {
		t.Errorf("report.html does not embed the plot and the delay")
	}
	var table bytes.Buffer
	r.PrintTable(&table)
	for _, want := range []string{"bypass", "hedged", "117.0", "38.0", "0.32", "17.5 ms", "4.80% (budget 5%)", "verdict: PASS"} {
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
