//go:build localstack && chaos

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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// soakSample is one reading of the processes that must not grow.
type soakSample struct {
	at                  time.Duration
	operatorRSS         float64 // bytes
	operatorGoroutines  float64
	envoyRSS, envoyHeap float64 // bytes
	delayMS             float64
	sent, failed        int
}

// TestSoak is #14's scenario 13 (make soak): SOAK_DURATION (default 30
// minutes) at 200 requests a second, with the workload's fast mode moving
// between 15 and 25 ms every 5 minutes so the delay keeps adapting. No request
// fails, and the operator's and Envoy's memory and the operator's goroutines
// stay flat: the last five minutes' mean is within 20% (goroutines: 10% or 20)
// of the mean of minutes 5 to 10, after the warm-up. The curves go to
// SOAK_OUT (default _output/soak) as soak.csv and soak.svg.
func TestSoak(t *testing.T) {
	length := 30 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 12*time.Minute {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 12m (two 5-minute stretches are compared)", v)
		}
		length = d
	}
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = filepath.Join("..", "..", "_output", "soak")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	s, ctx := startStackWithin(t, "bimodal", length+15*time.Minute)
	if _, err := s.ApplyPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitReady(ctx, 200, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	envoy := s.running("envoy")
	if envoy == nil {
		t.Fatal("Envoy is not running")
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	l := startLoad(loadCtx, s, 200)
	defer func() { stopLoad(); l.wg.Wait() }()

	start := time.Now()
	var samples []soakSample
	read := func() soakSample {
		op := func(name string) float64 { return operatorCounter(t, s, name, "") }
		m := envoyStats(t, s)
		p, err := s.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent, failed := l.count(start, time.Now())
		smp := soakSample{
			at:                 time.Since(start),
			operatorRSS:        op("process_resident_memory_bytes"),
			operatorGoroutines: op("go_goroutines"),
			envoyRSS:           rss(t, envoy.PID()),
			envoyHeap:          float64(num(m, "server.memory_heap_size")),
			sent:               sent, failed: failed,
		}
		if p.Status.EffectiveDelay != nil {
			smp.delayMS = float64(p.Status.EffectiveDelay.Milliseconds())
		}
		// A reading of zero is a broken reading, and would make the
		// flatness checks below pass whatever happens.
		if smp.operatorRSS <= 0 || smp.operatorGoroutines <= 0 || smp.envoyRSS <= 0 || smp.envoyHeap <= 0 {
			t.Fatalf("unreadable sample %+v: the soak cannot judge growth from it", smp)
		}
		return smp
	}
	fast := 15
	for next := start.Add(5 * time.Minute); time.Since(start) < length; time.Sleep(30 * time.Second) {
		if time.Now().After(next) {
			fast = 40 - fast // 15 <-> 25 ms
			if err := s.Shift(ctx, bimodal(fast, 0.05)); err != nil {
				t.Fatal(err)
			}
			next = next.Add(5 * time.Minute)
		}
		smp := read()
		samples = append(samples, smp)
		t.Logf("%5.0f s: operator RSS %5.1f MiB, %3.0f goroutines; Envoy RSS %5.1f MiB, heap %5.1f MiB; delay %3.0f ms; %d requests, %d failed",
			smp.at.Seconds(), smp.operatorRSS/(1<<20), smp.operatorGoroutines, smp.envoyRSS/(1<<20), smp.envoyHeap/(1<<20), smp.delayMS, smp.sent, smp.failed)
	}
	if err := writeSoak(out, samples); err != nil {
		t.Fatal(err)
	}
	t.Logf("curves in %s", out)

	last := samples[len(samples)-1]
	if last.failed > 0 {
		t.Errorf("%d of %d requests failed during the soak", last.failed, last.sent)
	}
	delays := map[float64]bool{}
	for _, smp := range samples {
		delays[smp.delayMS] = true
	}
	if len(delays) < 3 {
		t.Errorf("the delay took %d values in %s; the soak must keep it adapting", len(delays), length)
	}
	mean := func(from, to time.Duration, f func(soakSample) float64) float64 {
		sum, n := 0.0, 0
		for _, smp := range samples {
			if smp.at >= from && smp.at < to {
				sum += f(smp)
				n++
			}
		}
		return sum / float64(max(n, 1))
	}
	end := last.at + time.Second
	for _, c := range []struct {
		name     string
		f        func(soakSample) float64
		growth   float64
		absolute float64
	}{
		{"operator RSS", func(s soakSample) float64 { return s.operatorRSS }, 0.2, 0},
		{"operator goroutines", func(s soakSample) float64 { return s.operatorGoroutines }, 0.1, 20},
		{"Envoy RSS", func(s soakSample) float64 { return s.envoyRSS }, 0.2, 0},
		{"Envoy heap", func(s soakSample) float64 { return s.envoyHeap }, 0.2, 0},
	} {
		early, late := mean(5*time.Minute, 10*time.Minute, c.f), mean(end-5*time.Minute, end, c.f)
		t.Logf("%s: %.1f in minutes 5-10, %.1f in the last 5 minutes (%+.1f%%)", c.name, early, late, 100*(late-early)/early)
		if late > early*(1+c.growth) && late > early+c.absolute {
			t.Errorf("%s grew from %.1f to %.1f: more than %.0f%%", c.name, early, late, 100*c.growth)
		}
	}
}

// rss is a process's resident set size in bytes, from /proc.
func rss(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the RSS of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				t.Fatalf("VmRSS of pid %d: %q", pid, v)
			}
			return kb * 1024
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// writeSoak writes the samples as CSV and draws the four curves that must stay
// flat, in MiB (goroutines as they are), against minutes.
func writeSoak(dir string, samples []soakSample) error {
	var csv bytes.Buffer
	csv.WriteString("seconds,operator_rss_bytes,operator_goroutines,envoy_rss_bytes,envoy_heap_bytes,delay_ms,requests,failed\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%d,%d\n", s.at.Seconds(), s.operatorRSS, s.operatorGoroutines, s.envoyRSS, s.envoyHeap, s.delayMS, s.sent, s.failed)
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.csv"), csv.Bytes(), 0o644); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "tailcut soak: memory (MiB), goroutines and delay (ms) over time"
	p.X.Label.Text = "minutes"
	p.Add(plotter.NewGrid())
	for i, c := range []struct {
		name string
		f    func(soakSample) float64
	}{
		{"operator RSS (MiB)", func(s soakSample) float64 { return s.operatorRSS / (1 << 20) }},
		{"operator goroutines", func(s soakSample) float64 { return s.operatorGoroutines }},
		{"Envoy RSS (MiB)", func(s soakSample) float64 { return s.envoyRSS / (1 << 20) }},
		{"Envoy heap (MiB)", func(s soakSample) float64 { return s.envoyHeap / (1 << 20) }},
		{"delay (ms)", func(s soakSample) float64 { return s.delayMS }},
	} {
		pts := make(plotter.XYs, len(samples))
		for j, s := range samples {
			pts[j].X, pts[j].Y = s.at.Minutes(), c.f(s)
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		p.Add(line)
		p.Legend.Add(c.name, line)
	}
	p.Legend.Top = true
	return p.Save(10*vg.Inch, 5*vg.Inch, filepath.Join(dir, "soak.svg"))
}
