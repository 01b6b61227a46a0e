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
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// Arm is one arm's client-side latency, in milliseconds.
type Arm struct {
	Count       float64            `json:"count"`
	P50         float64            `json:"p50_ms"`
	P90         float64            `json:"p90_ms"`
	P95         float64            `json:"p95_ms"`
	P99         float64            `json:"p99_ms"`
	P999        float64            `json:"p999_ms"`
	Max         float64            `json:"max_ms"`
	ErrorRate   float64            `json:"error_rate"`
	Percentiles map[string]float64 `json:"percentiles_ms,omitempty"`
}

// Settle is what the settling phase sent.
type Settle struct {
	Duration  string             `json:"duration"`
	Requests  map[string]float64 `json:"requests"`
	ErrorRate float64            `json:"error_rate"`
}

// Report is report.json. Other tools read it: keep the documented keys stable.
type Report struct {
	// Arms holds "hedged" and the unhedged reference, keyed by UnhedgedArm:
	// "bypass" (the bypass route of the same Envoy) or "direct" (straight to
	// the replicas).
	Arms              map[string]Arm     `json:"arms"`
	UnhedgedArm       string             `json:"unhedged_arm"`
	Ratio             map[string]float64 `json:"ratio"`
	ExtraLoadPct      float64            `json:"extra_load_pct"`
	BudgetPct         int32              `json:"budget_pct"`
	DelayMS           float64            `json:"delay_ms"`
	DelayReason       string             `json:"delay_reason"`
	DelaySource       string             `json:"delay_source"`
	DroppedIterations float64            `json:"dropped_iterations"`
	Scenario          string             `json:"scenario"`
	RatePerArm        float64            `json:"rate_per_arm"`
	Duration          string             `json:"duration"`
	// Settle is the phase before the measured run, at the same rate and not
	// measured (nil when the run had none). Its errors and extra attempts
	// count in the verdict.
	Settle          *Settle  `json:"settle,omitempty"`
	PostsSent       float64  `json:"posts_sent"`
	PostSideEffects float64  `json:"post_side_effects"`
	Pass            bool     `json:"pass"`
	Reasons         []string `json:"reasons"`
}

// NewReport combines k6's summary, whose keys Report shares, with the policy's
// status.
func NewReport(summary map[string]any, policy *tailcutv1alpha1.HedgePolicy) (Report, error) {
	b, err := json.Marshal(summary)
	if err != nil {
		return Report{}, err
	}
	var k struct {
		Report
		Verdict struct {
			Pass    bool     `json:"pass"`
			Reasons []string `json:"reasons"`
		} `json:"verdict"`
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return Report{}, fmt.Errorf("reading the k6 summary: %w", err)
	}
	r := k.Report
	r.Pass, r.Reasons = k.Verdict.Pass, k.Verdict.Reasons
	if r.Reasons == nil {
		r.Reasons = []string{}
	}
	if r.UnhedgedArm == "" {
		r.UnhedgedArm = "bypass"
	}
	r.BudgetPct = policy.Spec.EffectiveBudget().MaxExtraLoadPercent
	r.DelayReason, r.DelaySource = policy.Status.DelayReason, string(policy.Status.DelaySource)
	if d := policy.Status.EffectiveDelay; d != nil {
		r.DelayMS = float64(d.Microseconds()) / 1000
	}
	return r, nil
}

// Unhedged is the reference arm.
func (r Report) Unhedged() Arm { return r.Arms[r.UnhedgedArm] }

// PrintTable writes the A/B table.
func (r Report) PrintTable(w io.Writer) {
	after := ""
	if r.Settle != nil {
		after = " after " + r.Settle.Duration + " at the same rate (not measured)"
	}
	fmt.Fprintf(w, "\ntailcut A/B, scenario %s: %g rps per arm for %s%s, through one Envoy to the same 3 replicas\n\n", r.Scenario, r.RatePerArm, r.Duration, after)
	fmt.Fprintf(w, "%-8s %8s %8s %8s %8s %8s %8s %8s\n", "arm", "count", "p50", "p90", "p95", "p99", "p99.9", "max")
	for _, name := range []string{r.UnhedgedArm, "hedged"} {
		a := r.Arms[name]
		fmt.Fprintf(w, "%-8s %8.0f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", name, a.Count, a.P50, a.P90, a.P95, a.P99, a.P999, a.Max)
	}
	fmt.Fprintf(w, "%-8s %8s %8.2f %8.2f %8.2f %8.2f %8.2f\n", "hedged/"+r.UnhedgedArm, "", r.Ratio["p50"], r.Ratio["p90"], r.Ratio["p95"], r.Ratio["p99"], r.Ratio["p999"])
	fmt.Fprintf(w, "\n(latency in ms, measured by k6 at the client)\n")
	fmt.Fprintf(w, "delay chosen by tailcut: %.1f ms (%s): %s\n", r.DelayMS, r.DelaySource, r.DelayReason)
	if r.Settle != nil {
		fmt.Fprintf(w, "settling: %.0f hedged and %.0f %s requests, error rate %.4f\n", r.Settle.Requests["hedged"], r.Settle.Requests[r.UnhedgedArm], r.UnhedgedArm, r.Settle.ErrorRate)
	}
	fmt.Fprintf(w, "extra load at the backends: %.2f%% (budget %d%%)\n", r.ExtraLoadPct, r.BudgetPct)
	fmt.Fprintf(w, "errors: %s %.4f, hedged %.4f; dropped iterations: %.0f; POSTs: %.0f sent, %.0f executed\n",
		r.UnhedgedArm, r.Unhedged().ErrorRate, r.Arms["hedged"].ErrorRate, r.DroppedIterations, r.PostsSent, r.PostSideEffects)
	if r.Pass {
		fmt.Fprintln(w, "verdict: PASS")
	} else {
		fmt.Fprintf(w, "verdict: FAIL: %v\n", r.Reasons)
	}
}

// Write writes report.json, report.svg (a percentile plot of both arms) and
// report.html into dir.
func (r Report) Write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	svg, err := r.plot()
	if err != nil {
		return fmt.Errorf("plotting: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.svg"), svg, 0o644); err != nil {
		return err
	}
	var html bytes.Buffer
	if err := reportHTML.Execute(&html, map[string]any{"R": r, "SVG": template.HTML(svg), "JSON": string(b)}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), html.Bytes(), 0o644)
}

// plot draws latency against percentile for both arms, with the percentile axis
// stretched toward the tail (-log10 of the tail fraction).
func (r Report) plot() ([]byte, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("tailcut A/B (%s): latency by percentile", r.Scenario)
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms)"
	p.X.Tick.Marker = percentileTicks{}
	p.Add(plotter.NewGrid())
	for i, name := range []string{r.UnhedgedArm, "hedged"} {
		pts := percentilePoints(r.Arms[name].Percentiles)
		if len(pts) == 0 {
			return nil, fmt.Errorf("arm %s has no percentiles", name)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color = plotColors[i]
		points.Color = plotColors[i]
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	p.Legend.Top, p.Legend.Left = true, true
	w, err := p.WriterTo(8*vg.Inch, 4.5*vg.Inch, "svg")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	return buf.Bytes(), err
}

func tailX(pct float64) float64 { return -math.Log10(1 - pct/100) }

func percentilePoints(m map[string]float64) plotter.XYs {
	var pts plotter.XYs
	for k, v := range m {
		pct, err := strconv.ParseFloat(k, 64)
		if err != nil || pct >= 100 {
			continue
		}
		pts = append(pts, plotter.XY{X: tailX(pct), Y: v})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
	return pts
}

type percentileTicks struct{}

func (percentileTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for _, pct := range []float64{50, 90, 99, 99.9, 99.99} {
		if x := tailX(pct); x >= min && x <= max {
			ticks = append(ticks, plot.Tick{Value: x, Label: "p" + strconv.FormatFloat(pct, 'f', -1, 64)})
		}
	}
	return ticks
}

var plotColors = []color.Color{color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}}

var reportHTML = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>tailcut A/B report: {{.R.Scenario}}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.2em .8em;text-align:right}pre{background:#f4f4f4;padding:1em}</style></head>
<body><h1>tailcut A/B: {{.R.Scenario}}</h1>
<p>{{.R.RatePerArm}} requests per second per arm for {{.R.Duration}}; delay chosen by tailcut: {{printf "%.1f" .R.DelayMS}} ms ({{.R.DelaySource}}): {{.R.DelayReason}}</p>
<table><tr><th>arm</th><th>count</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range $name, $a := .R.Arms}}<tr><th>{{$name}}</th><td>{{printf "%.0f" $a.Count}}</td><td>{{printf "%.1f" $a.P50}}</td><td>{{printf "%.1f" $a.P90}}</td><td>{{printf "%.1f" $a.P95}}</td><td>{{printf "%.1f" $a.P99}}</td><td>{{printf "%.1f" $a.P999}}</td><td>{{printf "%.1f" $a.Max}}</td></tr>
{{end}}</table>
<p>Extra load at the backends: {{printf "%.2f" .R.ExtraLoadPct}}% (budget {{.R.BudgetPct}}%). Verdict: {{if .R.Pass}}PASS{{else}}FAIL {{.R.Reasons}}{{end}}</p>
{{.SVG}}
<h2>report.json</h2><pre>{{.JSON}}</pre></body></html>
`))
