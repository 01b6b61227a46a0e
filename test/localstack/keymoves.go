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
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// KeyMove is how the keys' owners changed when a Service's replicas changed,
// under one of Envoy's consistent-hash load balancers, as a real Envoy placed
// them.
type KeyMove struct {
	LoadBalancer string
	// Change is "3 → 4", "6 → 8" or "8 − 1" (the fourth of eight removed).
	Change string
	// Moved is the share of keys whose owner changed; Ideal the least any
	// scheme moves (the keys a new replica must take, or the removed one
	// held).
	Moved, Ideal float64
	// MinKeys and MaxKeys are the fewest and most keys a replica owned after
	// the change; Keys the keys sent.
	MinKeys, MaxKeys, Keys int
}

// KeyMovesOptions configure RunKeyMoves.
type KeyMovesOptions struct {
	Dir  string
	Keys int
	Logf func(string, ...any)
}

// keyCounter is a replica that records the x-cache-key of every request.
type keyCounter struct {
	srv  *http.Server
	port int
	mu   sync.Mutex
	keys map[string]bool
}

func startKeyCounter() (*keyCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &keyCounter{port: ln.Addr().(*net.TCPAddr).Port, keys: map[string]bool{}}
	k.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get(cacheKeyHeader); key != "" {
			k.mu.Lock()
			k.keys[key] = true
			k.mu.Unlock()
		}
		_, _ = io.WriteString(w, "ok\n")
	})}
	go func() { _ = k.srv.Serve(ln) }()
	return k, nil
}

func (k *keyCounter) reset() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	seen := k.keys
	k.keys = map[string]bool{}
	return seen
}

// cacheKeyHeader is the workload's cache key header (test/workload).
const cacheKeyHeader = "x-cache-key"

// keyMoveSteps are the changes measured: from, to and which replicas (by
// index, of eight) serve after.
var keyMoveSteps = []struct {
	change   string
	from, to []int
	ideal    float64
}{
	{"3 → 4", []int{0, 1, 2}, []int{0, 1, 2, 3}, 1.0 / 4},
	{"6 → 8", []int{0, 1, 2, 3, 4, 5}, []int{0, 1, 2, 3, 4, 5, 6, 7}, 2.0 / 8},
	{"8 − 1", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{0, 1, 2, 4, 5, 6, 7}, 1.0 / 8},
}

// RunKeyMoves places o.Keys keys with a real Envoy running tailcut's
// configuration with affinity (RingHash with its default ring, Maglev with
// its default table) before and after each change of keyMoveSteps, and
// counts at the replicas which keys moved.
func RunKeyMoves(ctx context.Context, o KeyMovesOptions) ([]KeyMove, error) {
	envoy, err := envoyBin()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	module, err := harness.BuildHedgeAccountModule(o.Dir)
	if err != nil {
		return nil, err
	}
	var replicas []*keyCounter
	for range 8 {
		k, err := startKeyCounter()
		if err != nil {
			return nil, err
		}
		defer func() { _ = k.srv.Close() }()
		replicas = append(replicas, k)
	}
	owners := func(lb string, serving []int) (map[string]int, error) {
		port, err := harness.ReservePort()
		if err != nil {
			return nil, err
		}
		boot, err := affinityProxy(port, module, lb, replicas, serving)
		if err != nil {
			return nil, err
		}
		p, err := startBenchEnvoy(ctx, envoy, o.Dir, fmt.Sprintf("keys-%s-%d", lb, len(serving)), boot, 2, port, benchHost)
		if err != nil {
			return nil, err
		}
		defer p.Stop(5 * time.Second)
		for _, r := range replicas {
			r.reset()
		}
		if err := sendKeys(ctx, port, o.Keys); err != nil {
			return nil, err
		}
		owner := map[string]int{}
		for i, r := range replicas {
			for key := range r.reset() {
				if prev, ok := owner[key]; ok {
					return nil, fmt.Errorf("%s: key %s reached replicas %d and %d", lb, key, prev, i)
				}
				owner[key] = i
			}
		}
		if len(owner) != o.Keys {
			return nil, fmt.Errorf("%s: the replicas saw %d keys of %d", lb, len(owner), o.Keys)
		}
		return owner, nil
	}
	var moves []KeyMove
	for _, lb := range []string{plan.LoadBalancerRingHash, plan.LoadBalancerMaglev} {
		for _, step := range keyMoveSteps {
			before, err := owners(lb, step.from)
			if err != nil {
				return moves, err
			}
			after, err := owners(lb, step.to)
			if err != nil {
				return moves, err
			}
			m := KeyMove{LoadBalancer: lb, Change: step.change, Ideal: step.ideal, Keys: o.Keys, MinKeys: o.Keys}
			moved := 0
			perReplica := map[int]int{}
			for key, owner := range after {
				perReplica[owner]++
				if before[key] != owner {
					moved++
				}
			}
			for _, i := range step.to {
				m.MinKeys, m.MaxKeys = min(m.MinKeys, perReplica[i]), max(m.MaxKeys, perReplica[i])
			}
			m.Moved = float64(moved) / float64(o.Keys)
			o.Logf("%-8s %s: %.1f%% of %d keys moved (ideal %.1f%%); keys per replica after: %d to %d",
				lb, step.change, 100*m.Moved, o.Keys, 100*m.Ideal, m.MinKeys, m.MaxKeys)
			moves = append(moves, m)
		}
	}
	return moves, nil
}

// affinityProxy is the static bootstrap of tailcut's configuration for one
// policy on web.bench:80 with affinity on x-cache-key, whose endpoints are
// the serving replicas.
func affinityProxy(listenPort int, module, lb string, replicas []*keyCounter, serving []int) ([]byte, error) {
	a := &plan.Affinity{HashOn: plan.HashOnHeader, Name: cacheKeyHeader, LoadBalancer: lb, RingSize: 1024}
	if lb == plan.LoadBalancerMaglev {
		a.RingSize, a.TableSize = 0, 65537
	}
	var eps []plan.Endpoint
	for _, i := range serving {
		eps = append(eps, plan.Endpoint{Address: "127.0.0.1", Port: int32(replicas[i].port)})
	}
	slices.SortFunc(eps, func(a, b plan.Endpoint) int { return int(a.Port) - int(b.Port) })
	p := plan.RoutePlan{
		Name: "bench/web", Namespace: "bench", Service: "web", Port: 80,
		Hosts:     plan.ServiceHosts("web", "bench", 80),
		Match:     plan.Match{PathPrefix: "/", Methods: []string{"GET", "HEAD"}},
		Hedge:     &plan.Hedge{Delay: time.Second, MaxHedges: 1, RetryOn: []string{"connect-failure", "reset"}},
		Budget:    plan.Budget{Percent: 5, MinConcurrency: 3},
		Endpoints: eps,
		Affinity:  a,
	}
	res, err := envoyconf.Translate([]plan.RoutePlan{p}, envoyconf.TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: uint32(listenPort), HedgeAccountModule: module})
	if err != nil {
		return nil, err
	}
	b, err := envoyconf.StaticBootstrap(res, envoyconf.StaticOptions{})
	if err != nil {
		return nil, err
	}
	return envoyconf.MessageYAML(b)
}

// sendKeys sends one GET for each of keys keys (key-0, key-1...) through the
// proxy on port, from 16 clients.
func sendKeys(ctx context.Context, port, keys int) error {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	next := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for n := range next {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item", port), nil)
				if err != nil {
					errs <- err
					return
				}
				req.Host = benchHost
				req.Header.Set(cacheKeyHeader, "key-"+strconv.Itoa(n))
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("key-%d: %s", n, resp.Status)
					return
				}
			}
		})
	}
	var err error
send:
	for n := range keys {
		select {
		case next <- n:
		case err = <-errs:
			break send
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err != nil {
		return err
	}
	return <-errs
}
