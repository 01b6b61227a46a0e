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

// Command workload is tailcut's latency-variability test server. It answers every
// request after a latency drawn from a configurable model, stops work on a
// cancelled request, and exports what it saw as Prometheus metrics, so a test can
// count the extra load hedging adds and prove no POST was duplicated.
//
// Endpoints: /metrics (Prometheus), /config (GET the model as JSON, PUT a new
// one), /healthz; every other path is served with the model's latency.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Buckets (seconds) dense around 5-150ms, the range where hedge delays live; the
// same layout as the Envoy bootstrap's histogram_bucket_settings.
var latencyBuckets = []float64{
	.001, .002, .003, .004, .005, .006, .007, .008, .009, .010, .012, .014, .016, .018, .020, .022, .025, .028,
	.030, .033, .036, .040, .045, .050, .055, .060, .070, .080, .090, .100, .110, .120, .130, .140, .150,
	.175, .200, .250, .300, .400, .500, .750, 1, 2.5, 5, 10,
}

type metrics struct {
	duration    *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	cancelled   prometheus.Counter
	sideEffects *prometheus.CounterVec
	attempts    *prometheus.CounterVec
	cache       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, replica string) *metrics {
	labels := prometheus.Labels{"replica": replica}
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "Time to serve a request, completed or cancelled.",
			Buckets: latencyBuckets, ConstLabels: labels,
		}, []string{"method", "outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workload_requests_total", Help: "Requests received, by method.", ConstLabels: labels,
		}, []string{"method"}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "workload_cancelled_total", Help: "Requests whose caller went away before the answer (hedge losers).", ConstLabels: labels,
		}),
		sideEffects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workload_side_effects_total", Help: "Non-idempotent requests (POST, PUT, PATCH, DELETE) received; a duplicate shows here.", ConstLabels: labels,
		}, []string{"method"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workload_envoy_attempts_total", Help: "Requests by the x-envoy-attempt-count header Envoy sent (1 = first attempt).", ConstLabels: labels,
		}, []string{"attempt"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workload_cache_requests_total", Help: "Requests the cache model looked up, by result (hit or miss), hedge losers included.", ConstLabels: labels,
		}, []string{"result"}),
	}
	reg.MustRegister(m.duration, m.requests, m.cancelled, m.sideEffects, m.attempts, m.cache)
	return m
}

func handler(srv *Server, m *metrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/config", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPut, http.MethodPost:
			cfg := srv.Config()
			dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				http.Error(w, "bad config: "+err.Error(), http.StatusBadRequest)
				return
			}
			if err := srv.SetConfig(cfg); err != nil {
				http.Error(w, "bad config: "+err.Error(), http.StatusBadRequest)
				return
			}
		default:
			http.Error(w, "use GET or PUT", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(srv.Config())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.requests.WithLabelValues(r.Method).Inc()
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			m.sideEffects.WithLabelValues(r.Method).Inc()
		}
		if a := r.Header.Get("x-envoy-attempt-count"); a != "" {
			if n, err := strconv.Atoi(a); err == nil && n > 0 && n < 10 {
				m.attempts.WithLabelValues(a).Inc()
			}
		}
		result, err := srv.Serve(r.Context(), start, r.Header.Get(CacheKeyHeader))
		if result != "" {
			m.cache.WithLabelValues(string(result)).Inc()
		}
		switch {
		case errors.Is(err, ErrFailed):
			m.duration.WithLabelValues(r.Method, "failed").Observe(time.Since(start).Seconds())
			http.Error(w, "failed by failProbability", http.StatusServiceUnavailable)
			return
		case err != nil:
			m.cancelled.Inc()
			m.duration.WithLabelValues(r.Method, "cancelled").Observe(time.Since(start).Seconds())
			return
		}
		m.duration.WithLabelValues(r.Method, "ok").Observe(time.Since(start).Seconds())
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	cfg := DefaultConfig()
	if env := os.Getenv("WORKLOAD_CONFIG"); env != "" {
		if err := json.Unmarshal([]byte(env), &cfg); err != nil {
			return fmt.Errorf("WORKLOAD_CONFIG: %w", err)
		}
	}
	fs := flag.NewFlagSet("workload", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on")
	replica := fs.String("replica", hostname(), "replica name, a label on every metric")
	fs.TextVar(&cfg.Model, "model", cfg.Model, "latency model: bimodal, lognormal, stall, badhost, saturation or cache")
	fs.TextVar(&cfg.Base, "base", cfg.Base, "base latency")
	fs.Float64Var(&cfg.SlowProbability, "slow-probability", cfg.SlowProbability, "bimodal: share of slow requests")
	fs.TextVar(&cfg.SlowExtra, "slow-extra", cfg.SlowExtra, "bimodal and badhost: extra latency of a slow request")
	fs.TextVar(&cfg.Median, "median", cfg.Median, "lognormal: median latency")
	fs.Float64Var(&cfg.Sigma, "sigma", cfg.Sigma, "lognormal: sigma of log(latency)")
	fs.TextVar(&cfg.StallEvery, "stall-every", cfg.StallEvery, "stall: time between pauses")
	fs.TextVar(&cfg.StallFor, "stall-for", cfg.StallFor, "stall: length of each pause")
	fs.BoolVar(&cfg.BadHost, "bad-host", cfg.BadHost, "badhost: this replica is the slow one")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "saturation: requests served at once")
	fs.IntVar(&cfg.CacheSize, "cache-size", cfg.CacheSize, "cache: keys cached per replica")
	fs.TextVar(&cfg.MissExtra, "miss-extra", cfg.MissExtra, "cache: extra latency of a miss")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv, err := NewServer(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMetrics(reg, *replica)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", handler(srv, m))

	hs := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdown)
	}()
	c := srv.Config()
	log.Printf("workload %s serving on %s, model %s", *replica, *listen, c.Model)
	if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "workload"
	}
	return h
}
