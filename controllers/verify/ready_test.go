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

package verify

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// strayFirstConnection answers every request on the first connection it
// accepts with a 404 from server "keryx", as an egress proxy did to a warm-up
// that connected to a ClusterIP before kube-proxy had programmed it; it
// answers 200 on every later connection.
type strayFirstConnection struct {
	mu          sync.Mutex
	first       string
	connections int
	posts       atomic.Int64
}

func (s *strayFirstConnection) serve(t *testing.T) string {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			s.posts.Add(1)
		}
		s.mu.Lock()
		stray := r.RemoteAddr == s.first
		s.mu.Unlock()
		if stray {
			w.Header().Set("Server", "keryx")
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st != http.StateNew {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.connections == 0 {
			s.first = c.RemoteAddr().String()
		}
		s.connections++
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func streamsTo(url string) []stream {
	o := Options{URL: url + "/", Host: "web.demo", Unhedged: ArmBypass, Rate: 10, PostRate: 1}
	return o.streams()
}

// Every probe has a connection of its own: the first connection's 404s end
// with it, where a keep-alive client would have read them until the timeout.
func TestWaitReadyProbesOnNewConnections(t *testing.T) {
	s := &strayFirstConnection{}
	url := s.serve(t)
	var logged []string
	err := waitReady(context.Background(), streamsTo(url), 10*time.Second, func(f string, a ...any) {
		logged = append(logged, f)
	})
	if err != nil {
		t.Fatalf("waitReady: %v", err)
	}
	// The hedged and the bypass GETs, each readyInARow times, after the
	// first connection's 404.
	if want := 2*readyInARow + 1; s.connections != want {
		t.Errorf("%d connections, want %d (one per probe)", s.connections, want)
	}
	if len(logged) != 1 {
		t.Errorf("logged %d lines, want 1 (the 404 that made it wait): %q", len(logged), logged)
	}
	if n := s.posts.Load(); n != 0 {
		t.Errorf("%d POSTs probed: a POST must run once, in the run", n)
	}
}

// A route that never answers below 400 ends the wait at the timeout, with
// the answer and who gave it.
func TestWaitReadySaysWhatAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "keryx")
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	err := waitReady(context.Background(), streamsTo(srv.URL), 1500*time.Millisecond, func(string, ...any) {})
	if err == nil {
		t.Fatal("waitReady: no error from a route that answers 404")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s with a 1.5s timeout", took)
	}
	for _, want := range []string{`HTTP 404 from server "keryx"`, "--wait-ready", "x-tailcut-bypass", "Host web.demo"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Run waits before it reads or sends anything: a route that is not ready
// gets the probes and no load.
func TestRunSendsNothingToARouteThatIsNotReady(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	o := options(srv.URL)
	o.WaitReady = 1500 * time.Millisecond
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("Run: %v, want the routes' HTTP 503", err)
	}
	// One probe per GET target per second: about 4, not the 500 a run sends.
	if n := got.Load(); n > 10 {
		t.Errorf("%d requests reached the route, want only the probes", n)
	}
}

func TestProgressLine(t *testing.T) {
	p := newProgress(streamsTo("http://proxy"))
	p.add(ArmHedged, sample{ok: true})
	p.add(ArmBypass, sample{ok: false, err: "HTTP 404"})
	p.add(ArmBypass, sample{ok: true})
	want := "hedged 1 answered, 0 failed; bypass 2 answered, 1 failed (last: HTTP 404); post 0 answered, 0 failed"
	if got := p.line(); got != want {
		t.Errorf("line:\n got %s\nwant %s", got, want)
	}
}
