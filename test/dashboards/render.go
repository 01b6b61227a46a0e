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

package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Window is the time range and resolution of the panels' range queries.
type Window struct {
	Start, End time.Time
	Step       time.Duration
}

// Rendered is one dashboard drawn into a PNG.
type Rendered struct {
	Path string
	// NoData holds the titles of the panels whose queries all returned nothing.
	NoData []string
}

// RenderAll draws every dashboard in dir into outDir/dashboard-<file name>.png.
// It keeps going past a dashboard that fails, so one bad query still leaves the
// other pictures.
func RenderAll(ctx context.Context, api promv1.API, dir string, values map[string]string, w Window, outDir string) ([]Rendered, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Rendered
	var errs []error
	for _, f := range files {
		png := filepath.Join(outDir, "dashboard-"+strings.TrimSuffix(filepath.Base(f), ".json")+".png")
		noData, written, err := render(ctx, api, f, values, w, png)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(f), err))
		}
		if written {
			out = append(out, Rendered{Path: png, NoData: noData})
		}
	}
	return out, errors.Join(errs...)
}

// Render runs the panels' queries of the dashboard file at path over w, with
// Grafana's variables replaced by values, and draws the panels where their
// gridPos puts them into a PNG at out. It returns the titles of the panels that
// had no data. A failing query is drawn into its panel and returned as an error
// after the PNG is written, so the picture still shows the rest.
func Render(ctx context.Context, api promv1.API, path string, values map[string]string, w Window, out string) (noData []string, err error) {
	noData, _, err = render(ctx, api, path, values, w, out)
	return noData, err
}

func render(ctx context.Context, api promv1.API, path string, values map[string]string, w Window, out string) (noData []string, written bool, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	// Dashboard leaves out the layout, which only drawing needs.
	var d Dashboard
	var b board
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if w.Step <= 0 || !w.End.After(w.Start) {
		return nil, false, fmt.Errorf("window %v..%v step %v is empty", w.Start, w.End, w.Step)
	}
	panels := placePanels(flattenPanels(b.Panels))

	var errs []error
	var drawn []panelData
	for _, p := range panels {
		pd := panelData{layout: p}
		for _, tg := range p.Targets {
			if tg.Hide || strings.TrimSpace(tg.Expr) == "" {
				continue
			}
			pd.queried = true
			expr, problems := Substitute(tg.Expr, d.VariableNames(), values)
			if len(problems) > 0 {
				pd.failure = strings.Join(problems, "; ")
				errs = append(errs, fmt.Errorf("panel %q query %s: %s", p.Title, tg.RefID, pd.failure))
				continue
			}
			v, _, err := api.QueryRange(ctx, expr, promv1.Range{Start: w.Start, End: w.End, Step: w.Step})
			if err == nil {
				if _, ok := v.(model.Matrix); !ok {
					err = fmt.Errorf("got a %s, not a matrix", v.Type())
				}
			}
			if err != nil {
				pd.failure = err.Error()
				errs = append(errs, fmt.Errorf("panel %q query %s: %w\n  query: %s", p.Title, tg.RefID, err, expr))
				continue
			}
			for _, s := range v.(model.Matrix) {
				if len(s.Values) == 0 {
					continue
				}
				pd.series = append(pd.series, series{
					name:   legendName(tg.LegendFormat, s.Metric, expr, d.VariableNames(), values),
					refID:  tg.RefID,
					stream: s,
				})
			}
		}
		if pd.queried && len(pd.series) == 0 && pd.failure == "" {
			noData = append(noData, p.Title)
		}
		drawn = append(drawn, pd)
	}

	img := drawBoard(b.Title, w, drawn)
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return noData, false, err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return noData, false, err
	}
	return noData, true, errors.Join(errs...)
}

// board is the layout of a dashboard, which Dashboard does not carry.
type board struct {
	Title  string        `json:"title"`
	Panels []panelLayout `json:"panels"`
}

type panelLayout struct {
	Title           string           `json:"title"`
	Type            string           `json:"type"`
	GridPos         gridPos          `json:"gridPos"`
	FieldConfig     fieldConfig      `json:"fieldConfig"`
	Targets         []target         `json:"targets"`
	Panels          []panelLayout    `json:"panels"`
	Transformations []transformation `json:"transformations"`
}

// transformation is a table panel's data transformation; the renderer reads
// the column titles of "organize" (Grafana names a merged query's value
// column "Value #<refId>").
type transformation struct {
	ID      string `json:"id"`
	Options struct {
		RenameByName map[string]string `json:"renameByName"`
	} `json:"options"`
}

type gridPos struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

type fieldConfig struct {
	Defaults struct {
		Unit string   `json:"unit"`
		Min  *float64 `json:"min"`
		Max  *float64 `json:"max"`
	} `json:"defaults"`
	// Overrides set a unit per column of a table (matcher byName).
	Overrides []struct {
		Matcher struct {
			ID      string `json:"id"`
			Options string `json:"options"`
		} `json:"matcher"`
		Properties []struct {
			ID    string `json:"id"`
			Value any    `json:"value"`
		} `json:"properties"`
	} `json:"overrides"`
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	RefID        string `json:"refId"`
	Hide         bool   `json:"hide"`
}

type series struct {
	name   string
	refID  string // the panel query it came from
	stream *model.SampleStream
}

type panelData struct {
	layout  panelLayout
	queried bool
	series  []series
	failure string
}

// flattenPanels lists a row's panels after the row, as an expanded row shows them.
func flattenPanels(ps []panelLayout) []panelLayout {
	var out []panelLayout
	for _, p := range ps {
		nested := p.Panels
		p.Panels = nil
		out = append(out, p)
		out = append(out, flattenPanels(nested)...)
	}
	return out
}

// placePanels gives panels without a gridPos a place in a two-column grid below
// the placed ones, which is where Grafana would put them too.
func placePanels(ps []panelLayout) []panelLayout {
	bottom := 0
	for _, p := range ps {
		if p.GridPos.W > 0 {
			bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
		}
	}
	next := 0
	for i := range ps {
		if ps[i].GridPos.W > 0 && ps[i].GridPos.H > 0 {
			continue
		}
		ps[i].GridPos = gridPos{X: (next % 2) * gridColumns / 2, Y: bottom + (next/2)*8, W: gridColumns / 2, H: 8}
		if ps[i].Type == "row" {
			ps[i].GridPos.W, ps[i].GridPos.H = gridColumns, 1
		}
		next++
	}
	return ps
}

var templateLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

const maxExprLegend = 60

// legendName follows Grafana: legendFormat with {{label}} and $variables filled
// in, else the series' labels, else the query itself.
func legendName(format string, m model.Metric, expr string, defined []string, values map[string]string) string {
	if format != "" && format != "__auto" {
		name := templateLabel.ReplaceAllStringFunc(format, func(s string) string {
			return string(m[model.LabelName(templateLabel.FindStringSubmatch(s)[1])])
		})
		name, _ = Substitute(name, defined, values)
		if strings.TrimSpace(name) != "" {
			return name
		}
	}
	if len(m) > 0 {
		return m.String()
	}
	if r := []rune(expr); len(r) > maxExprLegend {
		return string(r[:maxExprLegend-1]) + "…"
	}
	return expr
}

// Geometry in pixels at 96 dpi; Grafana's grid is 24 columns of rows 30px high
// plus margins.
const (
	dpi          = 96
	imageWidth   = 1600
	gridColumns  = 24
	gridRow      = 36
	pageMargin   = 12
	panelGap     = 8
	headerHeight = 52
	panelPad     = 8
	titleHeight  = 24
	legendRow    = 18
	maxLegendRow = 3
)

// imageHeight is the PNG's height in pixels for panels placed down to grid row rows.
func imageHeight(rows int) int { return headerHeight + rows*gridRow + pageMargin }

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / dpi }

var (
	pageColor   = color.RGBA{R: 0xf4, G: 0xf5, B: 0xf5, A: 0xff}
	panelColor  = color.White
	borderColor = color.RGBA{R: 0xdc, G: 0xdd, B: 0xe0, A: 0xff}
	textColor   = color.RGBA{R: 0x24, G: 0x29, B: 0x2e, A: 0xff}
	mutedColor  = color.RGBA{R: 0x6e, G: 0x73, B: 0x7a, A: 0xff}
	gridColor   = color.RGBA{R: 0xe6, G: 0xe7, B: 0xe9, A: 0xff}
	errorColor  = color.RGBA{R: 0xd1, G: 0x0e, B: 0x5c, A: 0xff}
	// seriesColors is Grafana's classic palette in the shades its light theme uses.
	seriesColors = []color.RGBA{
		{R: 0x37, G: 0x87, B: 0x2d, A: 0xff}, // green
		{R: 0xe0, G: 0xb4, B: 0x00, A: 0xff}, // yellow
		{R: 0x1f, G: 0x60, B: 0xc4, A: 0xff}, // blue
		{R: 0xfa, G: 0x64, B: 0x00, A: 0xff}, // orange
		{R: 0xc4, G: 0x16, B: 0x2a, A: 0xff}, // red
		{R: 0x8f, G: 0x3b, B: 0xb8, A: 0xff}, // purple
		{R: 0x0a, G: 0x93, B: 0x9f, A: 0xff}, // teal
		{R: 0x8a, G: 0x6d, B: 0x3b, A: 0xff}, // brown
	}
)

func seriesColor(i int) color.RGBA { return seriesColors[i%len(seriesColors)] }

func textStyle(size vg.Length, c color.Color) text.Style {
	return text.Style{
		Color:   c,
		Font:    font.Font{Typeface: "Liberation", Variant: "Sans", Size: size},
		XAlign:  draw.XLeft,
		YAlign:  draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
}

func drawBoard(title string, w Window, panels []panelData) *vgimg.Canvas {
	rows := 0
	for _, p := range panels {
		rows = max(rows, p.layout.GridPos.Y+p.layout.GridPos.H)
	}
	height := imageHeight(rows)
	img := vgimg.NewWith(vgimg.UseWH(px(imageWidth), px(float64(height))), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(pageColor))
	page := draw.New(img)

	heading := textStyle(px(20), textColor)
	page.FillText(heading, vg.Point{X: px(pageMargin), Y: page.Max.Y - px(14)}, title)
	timeRange := textStyle(px(13), mutedColor)
	timeRange.XAlign = draw.XRight
	page.FillText(timeRange, vg.Point{X: page.Max.X - px(pageMargin), Y: page.Max.Y - px(18)},
		fmt.Sprintf("%s to %s, step %s, Prometheus range queries", w.Start.Format("2006-01-02 15:04:05"), w.End.Format("15:04:05 MST"), w.Step))

	column := float64(imageWidth-2*pageMargin+panelGap) / gridColumns
	for _, p := range panels {
		g := p.layout.GridPos
		left := pageMargin + float64(g.X)*column
		top := float64(headerHeight + g.Y*gridRow)
		width := float64(g.W)*column - panelGap
		h := float64(g.H*gridRow - panelGap)
		c := draw.Canvas{Canvas: page.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: px(left), Y: px(float64(height) - top - h)},
			Max: vg.Point{X: px(left + width), Y: px(float64(height) - top)},
		}}
		drawPanel(c, p, w)
	}
	return img
}

func drawPanel(c draw.Canvas, p panelData, w Window) {
	if p.layout.Type == "row" {
		c.FillText(textStyle(px(15), textColor), vg.Point{X: c.Min.X, Y: c.Max.Y}, p.layout.Title)
		return
	}
	corners := []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(panelColor, corners)
	c.StrokeLines(draw.LineStyle{Color: borderColor, Width: px(1)}, append(corners, c.Min))

	inner := draw.Crop(c, px(panelPad), -px(panelPad), px(panelPad), -px(panelPad))
	title := textStyle(px(14), textColor)
	c.FillText(title, vg.Point{X: inner.Min.X, Y: inner.Max.Y}, fitText(title, p.layout.Title, inner.Max.X-inner.Min.X))
	body := draw.Crop(inner, 0, 0, 0, -px(titleHeight))

	unit := p.layout.FieldConfig.Defaults.Unit
	switch {
	case p.failure != "":
		drawMessage(body, "Query error", p.failure, errorColor)
	case !p.queried:
	case len(p.series) == 0:
		drawMessage(body, "No data", "", mutedColor)
	case p.layout.Type == "stat" || p.layout.Type == "gauge" || p.layout.Type == "bargauge":
		drawStat(body, p.series, unit, w)
	case p.layout.Type == "table":
		drawTable(body, p)
	default:
		drawTimeSeries(body, p, w)
	}
}

func drawMessage(c draw.Canvas, headline, detail string, clr color.Color) {
	big := textStyle(px(16), clr)
	big.XAlign, big.YAlign = draw.XCenter, draw.YCenter
	c.FillText(big, c.Center(), headline)
	if detail != "" {
		small := textStyle(px(11), mutedColor)
		small.XAlign = draw.XCenter
		c.FillText(small, vg.Point{X: c.Center().X, Y: c.Center().Y - px(14)}, fitText(small, detail, c.Max.X-c.Min.X))
	}
}

// drawStat shows each series' last value large over a faint sparkline, as
// Grafana's stat panel does by default.
func drawStat(c draw.Canvas, ss []series, unit string, w Window) {
	width := (c.Max.X - c.Min.X) / vg.Length(len(ss))
	for i, s := range ss {
		cell := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: c.Min.X + vg.Length(i)*width, Y: c.Min.Y},
			Max: vg.Point{X: c.Min.X + vg.Length(i+1)*width, Y: c.Max.Y},
		}}
		clr := seriesColor(0)
		drawSparkline(cell, s.stream, w, color.NRGBA{R: clr.R, G: clr.G, B: clr.B, A: 0x40})
		value := "–"
		if v, ok := lastValue(s.stream); ok {
			value = formatValue(unit, v)
		}
		size := min(px(40), (cell.Max.Y-cell.Min.Y)*0.6)
		big := textStyle(size, clr)
		big.XAlign, big.YAlign = draw.XCenter, draw.YCenter
		cell.FillText(big, cell.Center(), value)
		if len(ss) > 1 {
			label := textStyle(px(11), mutedColor)
			label.XAlign = draw.XCenter
			cell.FillText(label, vg.Point{X: cell.Center().X, Y: cell.Max.Y}, fitText(label, s.name, width))
		}
	}
}

func drawSparkline(c draw.Canvas, s *model.SampleStream, w Window, clr color.Color) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range s.Values {
		if f := float64(v.Value); !math.IsNaN(f) && !math.IsInf(f, 0) {
			lo, hi = math.Min(lo, f), math.Max(hi, f)
		}
	}
	if lo > hi {
		return
	}
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	start, span := float64(w.Start.Unix()), w.End.Sub(w.Start).Seconds()
	bottom, height := c.Min.Y, (c.Max.Y-c.Min.Y)*0.45
	for _, seg := range segments(s, w.Step) {
		var pts []vg.Point
		for _, xy := range seg {
			pts = append(pts, vg.Point{
				X: c.Min.X + (c.Max.X-c.Min.X)*vg.Length((xy.X-start)/span),
				Y: bottom + height*vg.Length((xy.Y-lo)/(hi-lo)),
			})
		}
		c.StrokeLines(draw.LineStyle{Color: clr, Width: px(2)}, pts)
	}
}

func lastValue(s *model.SampleStream) (float64, bool) {
	for i := len(s.Values) - 1; i >= 0; i-- {
		if f := float64(s.Values[i].Value); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	return 0, false
}

// segments splits a series where Grafana would leave a gap: at NaN or infinite
// values (histogram_quantile without traffic) and where samples are missing.
func segments(s *model.SampleStream, step time.Duration) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	var last model.Time
	for _, v := range s.Values {
		f := float64(v.Value)
		broken := math.IsNaN(f) || math.IsInf(f, 0)
		if len(cur) > 0 && (broken || v.Timestamp.Sub(last) > step*3/2) {
			out = append(out, cur)
			cur = nil
		}
		if !broken {
			cur = append(cur, plotter.XY{X: float64(v.Timestamp.Unix()) + float64(v.Timestamp%1000)/1000, Y: f})
			last = v.Timestamp
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func drawTimeSeries(c draw.Canvas, p panelData, w Window) {
	legend := layoutLegend(p.series, c.Max.X-c.Min.X)
	legendHeight := px(float64(len(legend)*legendRow + 4))
	drawLegend(draw.Crop(c, 0, 0, 0, -(c.Max.Y-c.Min.Y-legendHeight)), legend)
	chart := draw.Crop(c, 0, 0, legendHeight, 0)

	pl := plot.New()
	pl.BackgroundColor = nil
	for _, axis := range []*plot.Axis{&pl.X, &pl.Y} {
		axis.LineStyle = draw.LineStyle{Color: color.Transparent}
		axis.Tick.LineStyle = draw.LineStyle{Color: color.Transparent}
		axis.Tick.Length = 0
		axis.Tick.Label.Font = font.Font{Typeface: "Liberation", Variant: "Sans", Size: px(11)}
		axis.Tick.Label.Color = mutedColor
		axis.Padding = px(4)
	}
	pl.X.Tick.Marker = clockTicks{}
	pl.Y.Tick.Marker = unitTicks{unit: p.layout.FieldConfig.Defaults.Unit}
	grid := plotter.NewGrid()
	grid.Vertical = draw.LineStyle{Color: gridColor, Width: px(1)}
	grid.Horizontal = draw.LineStyle{Color: gridColor, Width: px(1)}
	pl.Add(grid)

	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range p.series {
		style := draw.LineStyle{Color: seriesColor(i), Width: px(2)}
		for _, seg := range segments(s.stream, w.Step) {
			for _, xy := range seg {
				lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
			}
			if len(seg) == 1 {
				dot, err := plotter.NewScatter(seg)
				if err != nil {
					continue
				}
				dot.GlyphStyle = draw.GlyphStyle{Color: style.Color, Radius: px(2), Shape: draw.CircleGlyph{}}
				pl.Add(dot)
				continue
			}
			line, err := plotter.NewLine(seg)
			if err != nil {
				continue
			}
			line.LineStyle = style
			pl.Add(line)
		}
	}
	// Grafana's axes span the whole time range and start at zero for
	// non-negative data, which keeps small wiggles from looking large.
	pl.X.Min, pl.X.Max = float64(w.Start.Unix()), float64(w.End.Unix())
	if lo > hi {
		lo, hi = 0, 1
	}
	pl.Y.Min = math.Min(0, lo)
	pl.Y.Max = hi + (hi-pl.Y.Min)*0.08
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
	if d := p.layout.FieldConfig.Defaults; d.Min != nil || d.Max != nil {
		if d.Min != nil {
			pl.Y.Min = *d.Min
		}
		if d.Max != nil {
			pl.Y.Max = *d.Max
		}
	}
	pl.Draw(chart)
}

type legendEntry struct {
	name  string
	color color.Color
	x     vg.Length
}

const legendSwatch, legendSpacing = 14, 18

// layoutLegend flows the series' names into rows under the chart, like
// Grafana's list legend, and folds what does not fit into "+N more".
func layoutLegend(ss []series, width vg.Length) [][]legendEntry {
	style := textStyle(px(12), textColor)
	var rows [][]legendEntry
	var x vg.Length
	for i, s := range ss {
		name := fitText(style, s.name, width-px(legendSwatch+4))
		w := px(legendSwatch+4) + style.Width(name)
		if len(rows) == 0 || (x > 0 && x+w > width) {
			if len(rows) == maxLegendRow {
				last := rows[len(rows)-1]
				last[len(last)-1] = legendEntry{name: fmt.Sprintf("+%d more", len(ss)-i+1), color: color.Transparent, x: last[len(last)-1].x}
				return rows
			}
			rows = append(rows, nil)
			x = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], legendEntry{name: name, color: seriesColor(i), x: x})
		x += w + px(legendSpacing)
	}
	return rows
}

func drawLegend(c draw.Canvas, rows [][]legendEntry) {
	style := textStyle(px(12), textColor)
	style.YAlign = draw.YCenter
	for r, row := range rows {
		y := c.Max.Y - px(float64(r*legendRow+legendRow/2+4))
		for _, e := range row {
			c.StrokeLine2(draw.LineStyle{Color: e.color, Width: px(3)}, c.Min.X+e.x, y, c.Min.X+e.x+px(legendSwatch), y)
			c.FillText(style, vg.Point{X: c.Min.X + e.x + px(legendSwatch+4), Y: y}, e.name)
		}
	}
}

// fitText shortens s with an ellipsis until it fits in width.
func fitText(style text.Style, s string, width vg.Length) string {
	if style.Width(s) <= width {
		return s
	}
	r := []rune(s)
	for len(r) > 1 && style.Width(string(r)+"…") > width {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}

// clockTicks labels the time axis with wall-clock times at round intervals.
type clockTicks struct{}

func (clockTicks) Ticks(lo, hi float64) []plot.Tick {
	intervals := []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}
	interval := intervals[len(intervals)-1]
	for _, iv := range intervals {
		if (hi-lo)/iv <= 8 {
			interval = iv
			break
		}
	}
	layout := "15:04:05"
	if interval >= 60 {
		layout = "15:04"
	}
	var ticks []plot.Tick
	for t := math.Ceil(lo/interval) * interval; t <= hi; t += interval {
		ticks = append(ticks, plot.Tick{Value: t, Label: time.Unix(int64(t), 0).Format(layout)})
	}
	return ticks
}

// unitTicks labels the value axis in the panel's unit, scaled for the axis'
// largest value as Grafana does (0.004 s reads 4 ms).
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	var major []float64
	for _, t := range ticks {
		if t.Label != "" {
			major = append(major, t.Value)
		}
	}
	sc := scaleFor(u.unit, math.Max(math.Abs(lo), math.Abs(hi)))
	step := 1.0
	if len(major) > 1 {
		step = (major[1] - major[0]) * sc.factor
	}
	decimals := decimalsFor(step)
	for i := range ticks {
		switch {
		case ticks[i].Label == "":
		case ticks[i].Value == 0:
			ticks[i].Label = "0" + sc.suffix
		default:
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value*sc.factor, 'f', decimals, 64) + sc.suffix
		}
	}
	return ticks
}

type scale struct {
	factor float64
	suffix string
}

// scaleFor picks the display unit for values up to magnitude in a Grafana unit.
func scaleFor(unit string, magnitude float64) scale {
	si := func(suffix string) scale {
		switch {
		case magnitude >= 1e9:
			return scale{1e-9, " G" + suffix}
		case magnitude >= 1e6:
			return scale{1e-6, " M" + suffix}
		case magnitude >= 1e3:
			return scale{1e-3, " k" + suffix}
		}
		if suffix == "" {
			return scale{1, ""}
		}
		return scale{1, " " + suffix}
	}
	switch unit {
	case "s":
		switch {
		case magnitude == 0, magnitude >= 1 && magnitude < 120:
			return scale{1, " s"}
		case magnitude < 1e-3:
			return scale{1e6, " µs"}
		case magnitude < 1:
			return scale{1e3, " ms"}
		}
		return scale{1.0 / 60, " min"}
	case "ms":
		if magnitude >= 1000 {
			return scale{1e-3, " s"}
		}
		return scale{1, " ms"}
	case "percentunit":
		return scale{100, "%"}
	case "percent":
		return scale{1, "%"}
	case "ops":
		return si("ops/s")
	case "reqps":
		return si("req/s")
	case "", "none", "short":
		return si("")
	}
	return scale{1, " " + unit}
}

// decimalsFor is the number of decimals that tells ticks step apart.
func decimalsFor(step float64) int {
	if step <= 0 || math.IsNaN(step) || math.IsInf(step, 0) {
		return 2
	}
	d := max(0, int(math.Ceil(-math.Log10(step)-1e-9)))
	for d < 6 {
		scaled := step * math.Pow10(d)
		if math.Abs(scaled-math.Round(scaled)) < 1e-6*math.Max(1, scaled) {
			break
		}
		d++
	}
	return d
}

// formatValue writes v in unit with three significant digits, as a stat panel
// shows it.
func formatValue(unit string, v float64) string {
	sc := scaleFor(unit, math.Abs(v))
	scaled := v * sc.factor
	decimals := 2
	switch a := math.Abs(scaled); {
	case a >= 100 || a == math.Trunc(a):
		decimals = 0
	case a >= 10:
		decimals = 1
	}
	s := strconv.FormatFloat(scaled, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + sc.suffix
}

// drawTable draws a table panel as Grafana shows merged instant queries: one
// row per policy (the series' policy label), one column per query, titled as
// the panel's organize transformation renames "Value #<refId>". A query with
// a legend shows its legend (a label's value) instead of a number.
func drawTable(c draw.Canvas, p panelData) {
	titles := map[string]string{}
	for _, tr := range p.layout.Transformations {
		for from, to := range tr.Options.RenameByName {
			titles[from] = to
		}
	}
	units := map[string]string{}
	for _, o := range p.layout.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			if o.Matcher.ID == "byName" && prop.ID == "unit" {
				units[o.Matcher.Options], _ = prop.Value.(string)
			}
		}
	}
	header := []string{titles["policy"]}
	if header[0] == "" {
		header[0] = "policy"
	}
	var refs []string
	legends := map[string]bool{}
	for _, tg := range p.layout.Targets {
		refs = append(refs, tg.RefID)
		legends[tg.RefID] = tg.LegendFormat != ""
		title := titles["Value #"+tg.RefID]
		if title == "" {
			title = tg.RefID
		}
		header = append(header, title)
	}
	cells := map[string]map[string]string{}
	var rows []string
	for _, s := range p.series {
		row := string(s.stream.Metric["policy"])
		if cells[row] == nil {
			cells[row] = map[string]string{}
			rows = append(rows, row)
		}
		text := s.name
		if !legends[s.refID] {
			text = "–"
			if v, ok := lastValue(s.stream); ok {
				text = formatValue(units[header[1+slices.Index(refs, s.refID)]], v)
			}
		}
		cells[row][s.refID] = text
	}
	slices.Sort(rows)
	colWidth := (c.Max.X - c.Min.X) / vg.Length(len(header))
	lineHeight := px(18)
	y := c.Max.Y - lineHeight
	drawRow := func(values []string, style text.Style) {
		for i, v := range values {
			x := c.Min.X + vg.Length(i)*colWidth
			c.FillText(style, vg.Point{X: x, Y: y}, fitText(style, v, colWidth-px(6)))
		}
		y -= lineHeight
	}
	drawRow(header, textStyle(px(12), mutedColor))
	for _, row := range rows {
		if y < c.Min.Y {
			break
		}
		values := []string{row}
		for _, ref := range refs {
			values = append(values, cells[row][ref])
		}
		drawRow(values, textStyle(px(12), textColor))
	}
}
