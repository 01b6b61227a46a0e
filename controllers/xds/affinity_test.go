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

package xds

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

const (
	affinityKeys     = 1000
	requestsPerKey   = 2
	affinityKeyHdr   = "x-cache-key"
	affinityHedgeGap = 20 * time.Millisecond
)

// keyRoutes is where each attempt of each request went, as the replicas
// counted them: by key, one entry per request.
type keyRoutes map[string][]attemptHosts

type attemptHosts struct{ first, hedge string }

// TestHedgesGoToTheKeysNextOwner is #27's proof with a real Envoy: 1,000
// keys in the x-cache-key header, two requests each, through a policy with
// affinity to three replicas of which one is slow (300 ms, against a delay of
// 20 ms). The replicas count every attempt and its x-envoy-attempt-count.
//
// RingHash: where each attempt should go comes from outside tailcut, from
// the ring Envoy builds (harness.HashRing, from Envoy's documented
// arithmetic): every first attempt goes to the key's owner, and every hedge
// of a key the slow replica owns to the key's successor on the ring, the same
// replica for every request. Maglev: no outside model, so the test checks
// that the attempts of a key go to one owner, and its hedges to one other
// replica, for every request of the key.
func TestHedgesGoToTheKeysNextOwner(t *testing.T) {
	for _, lb := range []string{plan.LoadBalancerRingHash, plan.LoadBalancerMaglev} {
		t.Run(lb, func(t *testing.T) {
			slow, fast1, fast2 := harness.NewUpstream(t, slowDelay), harness.NewUpstream(t, 0), harness.NewUpstream(t, 0)
			replicas := []*harness.Upstream{slow, fast1, fast2}
			name := map[*harness.Upstream]string{}
			var endpoints []plan.Endpoint
			for _, r := range replicas {
				e := r.Endpoint(t)
				name[r] = fmt.Sprintf("%s:%d", e.Address, e.Port)
				endpoints = append(endpoints, e)
			}
			slices.SortFunc(endpoints, func(a, b plan.Endpoint) int { return int(a.Port) - int(b.Port) })
			affinity := &plan.Affinity{HashOn: plan.HashOnHeader, Name: affinityKeyHdr, LoadBalancer: lb, RingSize: 1024}
			if lb == plan.LoadBalancerMaglev {
				affinity.RingSize, affinity.TableSize = 0, 65537
			}
			port := servePlan(t, slow, func(p *plan.RoutePlan) {
				p.Endpoints = endpoints
				p.Affinity = affinity
				p.Hedge.Delay = affinityHedgeGap
				// A third of the requests need a hedge: a budget that
				// lets them all through, so the test sees where Envoy
				// sends them.
				p.Budget.Percent = 100
			})
			routes := sendKeys(t, port, replicas, name)
			slowName := name[slow]
			if lb == plan.LoadBalancerRingHash {
				var hosts []string
				for _, e := range endpoints {
					hosts = append(hosts, fmt.Sprintf("%s:%d", e.Address, e.Port))
				}
				checkRing(t, routes, harness.NewHashRing(hosts, affinity.RingSize), slowName)
			} else {
				checkSticky(t, routes, slowName)
			}
			owned := map[string]int{}
			hedges := map[string]int{}
			for _, reqs := range routes {
				owned[reqs[0].first]++
				for _, r := range reqs {
					if r.hedge != "" {
						hedges[r.hedge]++
					}
				}
			}
			t.Logf("%s: keys owned by replica: slow %d, others %d and %d; hedges received: slow %d, others %d and %d",
				lb, owned[slowName], owned[name[fast1]], owned[name[fast2]], hedges[slowName], hedges[name[fast1]], hedges[name[fast2]])
			for _, r := range replicas {
				if owned[name[r]] < affinityKeys/5 {
					t.Errorf("replica %s owns %d of %d keys: the hash does not spread them", name[r], owned[name[r]], affinityKeys)
				}
			}
			if hedges[slowName] != 0 {
				t.Errorf("the slow replica received %d hedges: a hedge must go to a replica not yet tried", hedges[slowName])
			}
		})
	}
}

// sendKeys sends requestsPerKey GETs for each key, from 8 clients, and
// returns where their attempts went.
func sendKeys(t *testing.T, port uint32, replicas []*harness.Upstream, name map[*harness.Upstream]string) keyRoutes {
	t.Helper()
	client := newLoadClient()
	ids := make(chan [2]string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/item", port), nil)
				if err != nil {
					panic(err)
				}
				req.Host = "web.e2e"
				req.Header.Set(affinityKeyHdr, id[0])
				req.Header.Set("x-test-id", id[1])
				resp, err := client.Do(req)
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failures = append(failures, resp.Status)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for n := range requestsPerKey {
		for k := range affinityKeys {
			key := fmt.Sprintf("key-%04d", k)
			ids <- [2]string{key, fmt.Sprintf("%s/%d", key, n)}
		}
	}
	close(ids)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, the first: %s", len(failures), failures[0])
	}
	routes := keyRoutes{}
	for n := range requestsPerKey {
		for k := range affinityKeys {
			key := fmt.Sprintf("key-%04d", k)
			id := fmt.Sprintf("%s/%d", key, n)
			var a attemptHosts
			for _, r := range replicas {
				for _, number := range r.AttemptNumbers()[id] {
					switch {
					case number == 1 && a.first == "":
						a.first = name[r]
					case number == 2 && a.hedge == "":
						a.hedge = name[r]
					default:
						t.Fatalf("request %s: attempt %d at %s, after first %q and hedge %q", id, number, name[r], a.first, a.hedge)
					}
				}
			}
			if a.first == "" {
				t.Fatalf("request %s: no replica counted its first attempt", id)
			}
			routes[key] = append(routes[key], a)
		}
	}
	return routes
}

// checkRing checks every attempt against the ring's answer.
func checkRing(t *testing.T, routes keyRoutes, ring *harness.HashRing, slow string) {
	t.Helper()
	wrongOwner, wrongHedge, unhedged, backToSlow := 0, 0, 0, 0
	for key, reqs := range routes {
		want := ring.Attempts(key, 1, plan.AffinityHostSelectionRetryMaxAttempts)
		if want[0] == slow && ring.Attempts(key, 1, plan.HostSelectionRetryMaxAttempts)[1] == slow {
			backToSlow++
		}
		for _, r := range reqs {
			if r.first != want[0] {
				wrongOwner++
			}
			if r.hedge != "" && r.hedge != want[1] {
				wrongHedge++
			}
			if want[0] == slow && r.hedge == "" {
				unhedged++
			}
		}
	}
	t.Logf("ring of %d entries: first attempts away from the key's owner: %d; hedges away from the key's successor: %d; requests to the slow owner not hedged: %d; keys of the slow replica whose hedge %d draws would have sent back to it: %d",
		ring.Len(), wrongOwner, wrongHedge, unhedged, plan.HostSelectionRetryMaxAttempts, backToSlow)
	if wrongOwner+wrongHedge+unhedged > 0 {
		t.Errorf("%d first attempts missed the key's owner, %d hedges missed its successor, %d requests to the slow owner were not hedged", wrongOwner, wrongHedge, unhedged)
	}
}

// checkSticky checks that every key has one owner and one hedge target.
func checkSticky(t *testing.T, routes keyRoutes, slow string) {
	t.Helper()
	owners, targets, unhedged := 0, 0, 0
	for _, reqs := range routes {
		first, hedge := reqs[0].first, ""
		for _, r := range reqs {
			if r.first != first {
				owners++
			}
			if r.hedge != "" {
				if hedge == "" {
					hedge = r.hedge
				} else if r.hedge != hedge {
					targets++
				}
			}
			if first == slow && r.hedge == "" {
				unhedged++
			}
		}
	}
	t.Logf("keys whose requests met more than one owner: %d; keys whose hedges met more than one replica: %d; requests to the slow owner not hedged: %d", owners, targets, unhedged)
	if owners+targets+unhedged > 0 {
		t.Errorf("%d keys with more than one owner, %d with hedges on more than one replica, %d requests to the slow owner not hedged", owners, targets, unhedged)
	}
}
