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

package harness

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// FakePrometheus serves Prometheus' instant-query API (/api/v1/query, GET or
// POST as client_golang sends it) on 127.0.0.1, each answer from Answer, so
// that a test sets exactly what Prometheus "says", failures included. It
// records every query. A real Prometheus is StartPrometheus.
type FakePrometheus struct {
	// URL is the server's base URL.
	URL string
	srv *httptest.Server

	mu     sync.Mutex
	answer func(query string) PromReply
	seen   []string
}

// PromReply is one canned answer: Body with status Code (0: 200), or, with
// Hang, no answer until the client gives up (or HangFor passes).
type PromReply struct {
	Code int
	Body string
	Hang bool
}

// HangFor bounds how long a Hang reply holds its request.
const HangFor = 10 * time.Second

// NewFakePrometheus starts a FakePrometheus answering with answer; nil
// answers every query with an empty vector. Close stops it.
func NewFakePrometheus(answer func(query string) PromReply) *FakePrometheus {
	f := &FakePrometheus{answer: answer}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// Close stops the server; requests held by Hang end first.
func (f *FakePrometheus) Close() {
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// Answer replaces how queries are answered.
func (f *FakePrometheus) Answer(answer func(query string) PromReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

// Queries are the queries received so far, in order.
func (f *FakePrometheus) Queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func (f *FakePrometheus) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	f.mu.Lock()
	f.seen = append(f.seen, q)
	answer := f.answer
	f.mu.Unlock()
	rep := PromReply{Body: PromVector()}
	if answer != nil {
		rep = answer(q)
	}
	if rep.Hang {
		select {
		case <-r.Context().Done():
		case <-time.After(HangFor):
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.Code != 0 {
		w.WriteHeader(rep.Code)
	}
	_, _ = w.Write([]byte(rep.Body))
}

// PromSample is one series of an instant vector.
type PromSample struct {
	Labels map[string]string
	Value  float64
}

// PromVector is the body of a successful instant query that returned the
// samples, all at one time.
func PromVector(samples ...PromSample) string {
	type series struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	out := make([]series, 0, len(samples))
	for _, s := range samples {
		m := s.Labels
		if m == nil {
			m = map[string]string{}
		}
		out = append(out, series{Metric: m, Value: [2]any{1.7e9, PromFloat(s.Value)}})
	}
	b, err := json.Marshal(map[string]any{
		"status": "success",
		"data":   map[string]any{"resultType": "vector", "result": out},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// PromFloat writes a sample value as Prometheus' JSON does.
func PromFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
