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

package plan

import (
	"errors"
	"fmt"
	"math/big"
)

// Named validation errors of an affinity. Callers match them with errors.Is.
var (
	ErrHashOnInvalid       = errors.New("affinity needs exactly one key: a header, cookie or query parameter name, or the path")
	ErrLoadBalancerUnknown = errors.New("affinity load balancer must be RingHash or Maglev")
	ErrRingSize            = errors.New("affinity ring size must be between 64 and 8388608")
	ErrTableSize           = errors.New("affinity table size must be a prime of at most 5000011")
)

// HashSource says which part of a request holds the affinity key.
type HashSource string

// The sources of an affinity key.
const (
	HashOnHeader         HashSource = "header"
	HashOnCookie         HashSource = "cookie"
	HashOnQueryParameter HashSource = "queryParameter"
	HashOnPath           HashSource = "path"
)

// The consistent-hash load balancers.
const (
	LoadBalancerRingHash = "RingHash"
	LoadBalancerMaglev   = "Maglev"
)

// Affinity spreads a Service's requests by a hash of a key from each request,
// so that every request of a key goes to the replica that owns the key, and
// its hedges to the key's next owners. Publishers render it on every route
// and on both clusters of the plan (hedged and bypass alike), so that the
// bypass arm of an A/B meets the same owners.
//
// On a hedge Envoy's previous_hosts predicate rejects the replicas already
// tried, and the load balancer draws again from the same hash
// (host_selection_retry_max_attempts times at most): the ring hash steps to
// the next ring entry, Maglev to a fixed alternate slot of the key, so the
// hedge lands on the same replica for every request of the key.
type Affinity struct {
	// HashOn is where the key comes from. Name names the header, cookie or
	// query parameter; it is empty for the path.
	HashOn HashSource `json:"hashOn"`
	Name   string     `json:"name,omitempty"`
	// LoadBalancer is LoadBalancerRingHash or LoadBalancerMaglev.
	LoadBalancer string `json:"loadBalancer"`
	// RingSize is the ring hash's minimum_ring_size; 0 with Maglev.
	RingSize uint64 `json:"ringSize,omitempty"`
	// TableSize is Maglev's table_size, a prime; 0 with the ring hash.
	TableSize uint64 `json:"tableSize,omitempty"`
}

// AffinityHostSelectionRetryMaxAttempts is how often Envoy may draw a host
// again for a hedge when the route hashes, instead of
// HostSelectionRetryMaxAttempts. Each draw steps one ring entry (or one
// Maglev alternate) further, and a replica owns runs of neighbouring
// entries, so a hedge may need several draws before it meets a replica not
// yet tried; when the draws run out Envoy sends the hedge to the last
// replica drawn, one already tried. On rings of 1,024 entries and 2 to 12
// replicas a first hedge needed up to 14 draws, a third (which must find
// the fourth distinct replica) up to 39, and 3 draws left a quarter of the
// hedges on a replica already tried (TestHashedHedgesFindTheirSuccessor).
// The chance that a hedge needs more than k draws falls as ((n-1)/n)^k for
// the last of n replicas: 128 leaves about 1e-16 per ring entry, and a draw
// is one lookup in the ring, so a count run out (a Service with fewer
// replicas than attempts) costs microseconds.
const AffinityHostSelectionRetryMaxAttempts = 128

// HostSelectionRetries is the route's host_selection_retry_max_attempts.
func (p RoutePlan) HostSelectionRetries() int64 {
	if p.Affinity != nil {
		return AffinityHostSelectionRetryMaxAttempts
	}
	return HostSelectionRetryMaxAttempts
}

// maxTableSize is Envoy's bound on Maglev's table_size.
const maxTableSize = 5000011

func (a *Affinity) validate() []error {
	var errs []error
	named := a.HashOn == HashOnHeader || a.HashOn == HashOnCookie || a.HashOn == HashOnQueryParameter
	keyed := named && a.Name != "" || a.HashOn == HashOnPath && a.Name == ""
	if !keyed {
		errs = append(errs, fmt.Errorf("%w: %s %q", ErrHashOnInvalid, a.HashOn, a.Name))
	}
	switch a.LoadBalancer {
	case LoadBalancerRingHash:
		if a.RingSize < 64 || a.RingSize > 8388608 || a.TableSize != 0 {
			errs = append(errs, ErrRingSize)
		}
	case LoadBalancerMaglev:
		if a.TableSize > maxTableSize || !new(big.Int).SetUint64(a.TableSize).ProbablyPrime(0) || a.RingSize != 0 {
			errs = append(errs, fmt.Errorf("%w: %d", ErrTableSize, a.TableSize))
		}
	default:
		errs = append(errs, fmt.Errorf("%w: %q", ErrLoadBalancerUnknown, a.LoadBalancer))
	}
	return errs
}
