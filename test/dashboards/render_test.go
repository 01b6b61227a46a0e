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
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tailcut/tailcut/test/envtestutil"
)

// fakeProm answers range queries from answer; the embedded interface panics on
// any other call, which would mean Render queried something it should not.
type fakeProm struct {
	promv1.API
	answer  func(query string) (model.Matrix, error)
	queries []string
	ranges  []promv1.Range
}

func (f *fakeProm) QueryRange(_ context.Context, query string, r promv1.Range, _ ...promv1.Option) (model.Value, promv1.Warnings, error) {
	f.queries = append(f.queries, query)
	f.ranges = append(f.ranges, r)
	m, err := f.answer(query)
	if err != nil {
		return nil, nil, err
	}
	return m, nil, nil
}

var testWindow = Window{
	Start: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	End:   time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC),
	Step:  5 * time.Second,
}

// wave is a series over testWindow that moves between base and base*1.5.
func wave(base float64, labels model.Metric) *model.SampleStream {
	s := &model.SampleStream{Metric: labels}
	for t := testWindow.Start; !t.After(testWindow.End); t = t.Add(testWindow.Step) {
		x := t.Sub(testWindow.Start).Seconds()
		s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(base * (1.25 + 0.25*math.Sin(x/30)))})
	}
	return s
}

const testDashboard = `{
  "title": "Render test",
  "templating": {"list": [{"name": "cluster", "type": "custom"}]},
  "panels": [
    {"type": "row", "title": "Overview", "collapsed": true, "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}, "panels": [
      {"type": "stat", "title": "Proxies", "gridPos": {"x": 0, "y": 1, "w": 6, "h": 4},
       "targets": [{"expr": "sum(proxies)", "refId": "A"}]}
    ]},
    {"type": "timeseries", "title": "Latency", "gridPos": {"x": 0, "y": 5, "w": 12, "h": 8},
     "fieldConfig": {"defaults": {"unit": "s"}},
     "targets": [
       {"expr": "latency{cluster=\"$cluster\"}", "legendFormat": "{{pod}} on $cluster", "refId": "A"},
       {"expr": "absent_metric{cluster=\"${cluster}\"}", "refId": "B"}
     ]},
    {"type": "timeseries", "title": "Errors", "gridPos": {"x": 12, "y": 5, "w": 12, "h": 8},
     "targets": [{"expr": "rate(errors_total{cluster=\"$cluster\"}[$__rate_interval])", "refId": "A"}]},
    {"type": "timeseries", "title": "Placed by the renderer",
     "targets": [{"expr": "sum(proxies)", "refId": "A"}]}
  ]
}`

func writeDashboard(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	return img
}

// panelPixels is where drawBoard puts a panel at g, in image coordinates.
func panelPixels(g gridPos) image.Rectangle {
	column := float64(imageWidth-2*pageMargin+panelGap) / gridColumns
	left := pageMargin + float64(g.X)*column
	top := headerHeight + g.Y*gridRow
	return image.Rect(int(left)+1, top+1, int(left+float64(g.W)*column-panelGap)-1, top+g.H*gridRow-panelGap-1)
}

func countColor(img image.Image, r image.Rectangle, want color.RGBA) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == want {
				n++
			}
		}
	}
	return n
}

func TestRenderDrawsPanelsAndReportsNoData(t *testing.T) {
	prom := &fakeProm{answer: func(q string) (model.Matrix, error) {
		switch {
		case strings.HasPrefix(q, "latency"):
			return model.Matrix{wave(0.02, model.Metric{"pod": "a"}), wave(0.05, model.Metric{"pod": "b"})}, nil
		case q == "sum(proxies)":
			return model.Matrix{wave(2, nil)}, nil
		}
		return model.Matrix{}, nil
	}}
	out := filepath.Join(t.TempDir(), "out.png")
	values := map[string]string{"cluster": "c1", "__rate_interval": "15s"}

	noData, err := Render(context.Background(), prom, writeDashboard(t, testDashboard), values, testWindow, out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Errors"}; !slices.Equal(noData, want) {
		t.Errorf("no data in %q, want %q", noData, want)
	}

	wantQueries := []string{"sum(proxies)", `latency{cluster="c1"}`, `absent_metric{cluster="c1"}`, `rate(errors_total{cluster="c1"}[15s])`, "sum(proxies)"}
	if !slices.Equal(prom.queries, wantQueries) {
		t.Errorf("queries\n got %q\nwant %q", prom.queries, wantQueries)
	}
	for _, r := range prom.ranges {
		if !r.Start.Equal(testWindow.Start) || !r.End.Equal(testWindow.End) || r.Step != testWindow.Step {
			t.Errorf("queried range %+v, want the window %+v", r, testWindow)
		}
	}

	img := decodePNG(t, out)
	// The auto-placed panel goes below the lowest one (y 5 + h 8), 8 rows high.
	if got, want := img.Bounds().Size(), image.Pt(imageWidth, imageHeight(13+8)); got != want {
		t.Errorf("image is %v, want %v", got, want)
	}
	latency := panelPixels(gridPos{X: 0, Y: 5, W: 12, H: 8})
	for i := range 2 {
		if n := countColor(img, latency, seriesColor(i)); n < 200 {
			t.Errorf("the Latency panel has %d pixels of series %d's color, want a drawn line", n, i)
		}
	}
	errorsPanel := panelPixels(gridPos{X: 12, Y: 5, W: 12, H: 8})
	for i := range seriesColors {
		if n := countColor(img, errorsPanel, seriesColor(i)); n > 0 {
			t.Errorf("the empty Errors panel has %d pixels of series %d's color", n, i)
		}
	}
	if n := countColor(img, panelPixels(gridPos{X: 0, Y: 1, W: 6, H: 4}), seriesColor(0)); n < 100 {
		t.Errorf("the Proxies stat has %d pixels of its value's color, want its value drawn", n)
	}
}

func TestRenderDrawsTheRestWhenAQueryFails(t *testing.T) {
	prom := &fakeProm{answer: func(q string) (model.Matrix, error) {
		if strings.HasPrefix(q, "rate(errors_total") {
			return nil, errors.New("parse error: unexpected end of input")
		}
		return model.Matrix{wave(1, model.Metric{"pod": "a"})}, nil
	}}
	dir := filepath.Dir(writeDashboard(t, testDashboard))
	rendered, err := RenderAll(context.Background(), prom, dir, map[string]string{"cluster": "c1", "__rate_interval": "15s"}, testWindow, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `panel "Errors"`) || !strings.Contains(err.Error(), "unexpected end of input") {
		t.Errorf("error %v, want one naming the Errors panel and Prometheus' message", err)
	}
	if len(rendered) != 1 {
		t.Fatalf("rendered %+v, want the one dashboard despite the failed query", rendered)
	}
	if len(rendered[0].NoData) != 0 {
		t.Errorf("no data in %q; a failed query is an error, not missing data", rendered[0].NoData)
	}
	img := decodePNG(t, rendered[0].Path)
	if n := countColor(img, panelPixels(gridPos{X: 12, Y: 5, W: 12, H: 8}), errorColor); n < 20 {
		t.Errorf("the failed Errors panel has %d pixels of the error color, want its message drawn", n)
	}
}

func TestRenderRefusesAnUndefinedVariable(t *testing.T) {
	prom := &fakeProm{answer: func(string) (model.Matrix, error) { return model.Matrix{wave(1, nil)}, nil }}
	_, err := Render(context.Background(), prom, writeDashboard(t, testDashboard), map[string]string{"__rate_interval": "15s"}, testWindow, filepath.Join(t.TempDir(), "out.png"))
	if err == nil || !strings.Contains(err.Error(), "$cluster has no value") {
		t.Errorf("error %v, want $cluster has no value", err)
	}
	for _, q := range prom.queries {
		if strings.Contains(q, "$") {
			t.Errorf("sent %q to Prometheus with a variable still in it", q)
		}
	}
}

// TestRenderAllChartDashboards draws the chart's own dashboards, so a panel type,
// unit or layout they start using and the renderer cannot draw shows up here.
func TestRenderAllChartDashboards(t *testing.T) {
	dir := filepath.Join(envtestutil.RepoRoot(), "charts", "tailcut", "dashboards")
	prom := &fakeProm{answer: func(q string) (model.Matrix, error) {
		return model.Matrix{wave(0.03, model.Metric{"policy": "demo/workload", "pod": "tailcut-0"}), wave(0.01, model.Metric{"policy": "demo/other", "pod": "tailcut-1"})}, nil
	}}
	values := map[string]string{"__rate_interval": "15s", "__interval": "5s", "__range": "5m", "datasource": "prometheus",
		"policy": "demo/workload", "cluster": "tailcut_demo_workload_80", "mesh_routes": ""}
	outDir := t.TempDir()
	if keep := os.Getenv("DASHBOARD_RENDER_DIR"); keep != "" {
		outDir = keep
	}
	rendered, err := RenderAll(context.Background(), prom, dir, values, testWindow, outDir)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rendered) != len(ds) {
		t.Fatalf("rendered %d dashboards, the chart has %d", len(rendered), len(ds))
	}
	for i, r := range rendered {
		if want := "dashboard-" + strings.TrimSuffix(ds[i].File, ".json") + ".png"; filepath.Base(r.Path) != want {
			t.Errorf("wrote %s, want %s", r.Path, want)
		}
		if len(r.NoData) > 0 {
			t.Errorf("%s: no data in %q although every query answered", r.Path, r.NoData)
		}
		if got := decodePNG(t, r.Path).Bounds().Dx(); got != imageWidth {
			t.Errorf("%s is %d pixels wide, want %d", r.Path, got, imageWidth)
		}
	}
}

func TestLegendName(t *testing.T) {
	defined := []string{"cluster"}
	values := map[string]string{"cluster": "c1"}
	for _, tc := range []struct {
		format string
		metric model.Metric
		want   string
	}{
		{"{{pod}} on $cluster", model.Metric{"pod": "a"}, "a on c1"},
		{"NACK {{ type }}", model.Metric{"type": "cluster"}, "NACK cluster"},
		{"{{missing}}x", model.Metric{"pod": "a"}, "x"},
		{"", model.Metric{"pod": "a"}, `{pod="a"}`},
		{"__auto", model.Metric{"__name__": "up", "job": "j"}, `up{job="j"}`},
		{"", nil, "sum(x)"},
	} {
		if got := legendName(tc.format, tc.metric, "sum(x)", defined, values); got != tc.want {
			t.Errorf("legendName(%q, %v) = %q, want %q", tc.format, tc.metric, got, tc.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		unit string
		v    float64
		want string
	}{
		{"s", 0.0123, "12.3 ms"},
		{"s", 0.00005, "50 µs"},
		{"s", 2.5, "2.5 s"},
		{"ms", 2500, "2.5 s"},
		{"percentunit", 0.05, "5%"},
		{"percentunit", 0.0412, "4.12%"},
		{"percent", 12.34, "12.3%"},
		{"none", 3, "3"},
		{"none", 11.0027, "11"},
		{"", 1234, "1.23 k"},
		{"reqps", 150.4, "150 req/s"},
		{"ops", 0.25, "0.25 ops/s"},
		{"bytes", 7, "7 bytes"},
	} {
		if got := formatValue(tc.unit, tc.v); got != tc.want {
			t.Errorf("formatValue(%q, %g) = %q, want %q", tc.unit, tc.v, got, tc.want)
		}
	}
}

func TestUnitTicksScaleTheAxis(t *testing.T) {
	var labels []string
	for _, tick := range (unitTicks{unit: "s"}).Ticks(0, 0.05) {
		if tick.Label != "" {
			labels = append(labels, tick.Label)
		}
	}
	if len(labels) < 2 || labels[0] != "0 ms" || !strings.HasSuffix(labels[len(labels)-1], " ms") {
		t.Errorf("ticks for 0..50ms in seconds are labelled %q, want 0 ms ... in ms", labels)
	}
	labels = nil
	for _, tick := range (unitTicks{unit: "percentunit"}).Ticks(0, 0.1) {
		if tick.Label != "" {
			labels = append(labels, tick.Label)
		}
	}
	if !slices.Contains(labels, "5%") {
		t.Errorf("ticks for 0..10%% as a fraction are labelled %q, want 5%% among them", labels)
	}
}

func TestSegmentsBreakAtGapsAndNaN(t *testing.T) {
	at := func(sec int64, v float64) model.SamplePair {
		return model.SamplePair{Timestamp: model.TimeFromUnix(sec), Value: model.SampleValue(v)}
	}
	s := &model.SampleStream{Values: []model.SamplePair{
		at(0, 1), at(5, 2), at(10, math.NaN()), at(15, 3), at(20, 4), at(40, 5), at(45, math.Inf(1)),
	}}
	var lengths []int
	for _, seg := range segments(s, 5*time.Second) {
		lengths = append(lengths, len(seg))
	}
	if want := []int{2, 2, 1}; !slices.Equal(lengths, want) {
		t.Errorf("segment lengths %v, want %v", lengths, want)
	}
}

func TestClockTicksAreRound(t *testing.T) {
	lo, hi := float64(testWindow.Start.Unix()+7), float64(testWindow.End.Unix())
	ticks := clockTicks{}.Ticks(lo, hi)
	if len(ticks) < 3 || len(ticks) > 9 {
		t.Fatalf("%d ticks over five minutes, want 3 to 9", len(ticks))
	}
	for _, tick := range ticks {
		if int64(tick.Value)%30 != 0 || tick.Value < lo || tick.Value > hi {
			t.Errorf("tick at %v is not a round time inside the window", tick.Value)
		}
	}
}
