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
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
)

// SlowPath is the path the Upstream answers after SlowFor.
const (
	SlowPath = "/slow"
	SlowFor  = 300 * time.Millisecond
	// FailPath is the path it answers 503.
	FailPath = "/fail"
)

// Upstream stands in for a replica behind Envoy: an HTTP server that records
// every attempt it gets (by method, and by the x-test-id the client chose),
// the x-envoy-* request headers that reached it, and the requests whose
// client (Envoy) gave up on them. It answers after Delay, SlowPath after
// SlowFor, and FailPath with 503.
type Upstream struct {
	srv       *httptest.Server
	delay     time.Duration
	mu        sync.Mutex
	byMethod  map[string]int
	arrived   map[string][]time.Time // when each attempt arrived, by x-test-id
	numbers   map[string][]int       // each attempt's x-envoy-attempt-count, by x-test-id
	timeLeft  map[string][]time.Duration
	leaked    map[string]bool // x-envoy-* request headers that reached it
	cancelled atomic.Int64
}

// NewUpstream starts an Upstream on 127.0.0.1, closed when the test ends.
func NewUpstream(tb testing.TB, delay time.Duration) *Upstream {
	u := &Upstream{delay: delay, byMethod: map[string]int{}, arrived: map[string][]time.Time{}, numbers: map[string][]int{}, timeLeft: map[string][]time.Duration{}, leaked: map[string]bool{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	tb.Cleanup(u.srv.Close)
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.byMethod[r.Method]++
	id := r.Header.Get("x-test-id")
	u.arrived[id] = append(u.arrived[id], time.Now())
	n, _ := strconv.Atoi(r.Header.Get("x-envoy-attempt-count"))
	u.numbers[id] = append(u.numbers[id], n)
	if ms, err := strconv.Atoi(r.Header.Get("x-envoy-expected-rq-timeout-ms")); err == nil {
		u.timeLeft[id] = append(u.timeLeft[id], time.Duration(ms)*time.Millisecond)
	}
	for k := range r.Header {
		k = strings.ToLower(k)
		// Envoy's own: the attempt count tailcut asks for, and the client's
		// address and the timeout it records as an edge proxy.
		if strings.HasPrefix(k, "x-envoy-") && k != "x-envoy-attempt-count" && k != "x-envoy-external-address" && k != "x-envoy-expected-rq-timeout-ms" {
			u.leaked[k+": "+r.Header.Get(k)] = true
		}
	}
	if n := r.Header.Get("x-envoy-attempt-count"); n != "1" && n != "2" {
		u.leaked["x-envoy-attempt-count: "+n] = true
	}
	u.mu.Unlock()
	wait := u.delay
	switch r.URL.Path {
	case SlowPath:
		wait = SlowFor
	case FailPath:
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			u.cancelled.Add(1)
			return
		}
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Count is how many attempts of the method arrived.
func (u *Upstream) Count(method string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byMethod[method]
}

// Attempts is how many attempts of the request with x-test-id id arrived.
func (u *Upstream) Attempts(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.arrived[id])
}

// Arrivals are when each attempt arrived, by x-test-id.
func (u *Upstream) Arrivals() map[string][]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.arrived)
}

// TimeLeft is, for each attempt that arrived, the time Envoy had left of
// the route's timeout when it sent the attempt (its
// x-envoy-expected-rq-timeout-ms), by x-test-id. The difference between a
// request's first attempt and its hedge is when Envoy sent the hedge, on
// Envoy's clock: unlike Arrivals, it does not wait on this process's
// scheduler.
func (u *Upstream) TimeLeft() map[string][]time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.timeLeft)
}

// AttemptNumbers are the x-envoy-attempt-count of each attempt that arrived
// (1 for a request's first, 2 for its first hedge...), by x-test-id.
func (u *Upstream) AttemptNumbers() map[string][]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.numbers)
}

// Leaked are the x-envoy-* request headers that reached the upstream (name:
// value), other than Envoy's own.
func (u *Upstream) Leaked() map[string]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.leaked)
}

// Cancelled is how many requests ended before the upstream answered them.
func (u *Upstream) Cancelled() int64 { return u.cancelled.Load() }

// Endpoint is the upstream's address as a plan endpoint.
func (u *Upstream) Endpoint(tb testing.TB) plan.Endpoint {
	tb.Helper()
	host, port, err := net.SplitHostPort(u.srv.Listener.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		tb.Fatal(err)
	}
	return plan.Endpoint{Address: host, Port: int32(p)}
}
