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
	"github.com/tailcut/tailcut/controllers/verify"
)

// Report is report.json: `tailcut verify`'s report (whose keys stay stable)
// and the delay the policy had at the end of the run.
type Report struct {
	verify.Report
	DelayMS     float64 `json:"delay_ms"`
	DelayReason string  `json:"delay_reason"`
	DelaySource string  `json:"delay_source"`
}

// NewReport adds the policy's delay to the verifier's report.
func NewReport(vr *verify.Report, policy *tailcutv1alpha1.HedgePolicy) Report {
	r := Report{Report: *vr, DelayReason: policy.Status.DelayReason, DelaySource: string(policy.Status.DelaySource)}
	if d := policy.Status.EffectiveDelay; d != nil {
		r.DelayMS = float64(d.Microseconds()) / 1000
	}
	return r
}

// ExtraLoadPct is the larger of the measured extra loads (Envoy's counters,
// the replicas'), or -1 when neither was measured.
func (r Report) ExtraLoadPct() float64 {
	pct := -1.0
	if e := r.ExtraLoad.Envoy; e != nil {
		pct = max(pct, e.Pct)
	}
	if rl := r.ExtraLoad.Replicas; rl != nil {
		pct = max(pct, rl.Pct)
	}
	return pct
}

// Errors counts the failed requests of every arm, in both phases.
func (r Report) Errors() int {
	n := 0
	for _, a := range r.Arms {
		n += a.Errors + a.SettleErrors
	}
	return n
}

// PrintTable writes the verifier's table and the delay tailcut chose.
func (r Report) PrintTable(w io.Writer) {
	r.Report.PrintTable(w)
	fmt.Fprintf(w, "delay chosen by tailcut at the end of the run: %.1f ms (%s): %s\n", r.DelayMS, r.DelaySource, r.DelayReason)
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
<p>Extra load: {{printf "%.2f" .R.ExtraLoadPct}}% (budget {{.R.BudgetPct}}%). Verdict: {{if .R.Pass}}PASS{{else}}FAIL {{.R.Reasons}}{{end}}</p>
{{.SVG}}
<h2>report.json</h2><pre>{{.JSON}}</pre></body></html>
`))
