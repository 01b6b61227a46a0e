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

package plan_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

// TestHashedHedgesFindTheirSuccessor shows why AffinityHostSelectionRetryMaxAttempts
// is enough: on rings of 2 to 12 replicas (pod addresses drawn at random,
// 20 Services per size, Envoy's default of 1,024 entries), it walks from every
// entry to the replica each of up to 3 hedges goes to, and finds the most draws
// any hedge needs. Envoy's former count of 3 is not enough: with it some keys'
// hedges would go back to a replica already tried.
func TestHashedHedgesFindTheirSuccessor(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	worst, short := 0, 0
	var worstOf [4]int // by hedge
	for replicas := 2; replicas <= 12; replicas++ {
		for service := range 20 {
			var hosts []string
			for range replicas {
				hosts = append(hosts, fmt.Sprintf("10.%d.%d.%d:8080", rng.IntN(256), rng.IntN(256), 1+rng.IntN(254)))
			}
			ring := harness.NewHashRing(hosts, 1024)
			for i := range ring.Len() {
				for hedge := 1; hedge <= 3 && hedge < replicas; hedge++ {
					draws := ring.Reach(i, hedge+1)
					if draws < 0 {
						t.Fatalf("service %d of %d replicas: the ring misses a replica", service, replicas)
					}
					worst, worstOf[hedge] = max(worst, draws), max(worstOf[hedge], draws)
					if draws > plan.HostSelectionRetryMaxAttempts {
						short++
					}
				}
			}
		}
	}
	t.Logf("the most draws a hedge needed: %d (first hedge %d, second %d, third %d; allowed: %d); hedges that %d draws would not place: %d",
		worst, worstOf[1], worstOf[2], worstOf[3], plan.AffinityHostSelectionRetryMaxAttempts, plan.HostSelectionRetryMaxAttempts, short)
	if 2*worst > plan.AffinityHostSelectionRetryMaxAttempts {
		t.Errorf("a hedge needed %d draws: %d leaves less than a margin of 2", worst, plan.AffinityHostSelectionRetryMaxAttempts)
	}
	if short == 0 {
		t.Errorf("every hedge found a new replica within %d draws: the raise is not needed", plan.HostSelectionRetryMaxAttempts)
	}
}
