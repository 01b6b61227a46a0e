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
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// HashRing is Envoy's ring hash load balancer (ring_hash_lb.cc, xxHash,
// equal weights, hosts hashed by address) worked out independently of
// tailcut, so that tests know where Envoy sends each key before they ask it:
//
//   - each host puts ceil(minRingSize/hosts) entries on the ring, at
//     xxHash64("<ip>:<port>_<i>");
//   - a request's key hashes to xxHash64(value), and goes to the first
//     entry at or after it, wrapping round;
//   - when a retry host predicate rejects the host drawn, draw i takes the
//     entry i places further on.
type HashRing struct {
	hashes []uint64
	hosts  []string
}

// NewHashRing builds the ring of the hosts ("ip:port"), in the order Envoy
// received them.
func NewHashRing(hosts []string, minRingSize uint64) *HashRing {
	type entry struct {
		hash uint64
		host string
	}
	var entries []entry
	// Envoy's arithmetic, in the same floating point: hosts of equal weight
	// each get scale/hosts entries, the running sums deciding the rounding.
	weight := 1.0 / float64(len(hosts))
	scale := math.Ceil(weight*float64(minRingSize)) / weight
	current, target := 0.0, 0.0
	for _, h := range hosts {
		target += scale * weight
		for i := 0; current < target; i++ {
			entries = append(entries, entry{xxhash.Sum64String(h + "_" + strconv.Itoa(i)), h})
			current++
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	r := &HashRing{}
	for _, e := range entries {
		r.hashes = append(r.hashes, e.hash)
		r.hosts = append(r.hosts, e.host)
	}
	return r
}

// Len is the number of entries on the ring.
func (r *HashRing) Len() int { return len(r.hashes) }

// Entry is the index of the entry a key goes to.
func (r *HashRing) Entry(key string) int {
	h := xxhash.Sum64String(key)
	i := sort.Search(len(r.hashes), func(i int) bool { return r.hashes[i] >= h })
	if i == len(r.hashes) {
		return 0
	}
	return i
}

// Attempts are the hosts of a request with the key and its hedges, as Envoy
// picks them with the previous_hosts predicate and up to draws further draws
// per attempt: each takes the first entry on from the key's that is not a
// host already tried, or, when the draws run out, the last one drawn.
func (r *HashRing) Attempts(key string, hedges, draws int) []string {
	start := r.Entry(key)
	var tried []string
	for range hedges + 1 {
		var host string
		for i := 0; i <= draws; i++ {
			host = r.hosts[(start+i)%len(r.hosts)]
			if !slices.Contains(tried, host) {
				break
			}
		}
		tried = append(tried, host)
	}
	return tried
}

// Reach is how many entries on from entry i the walk round the ring meets
// its n-th distinct host (0 for the first), or -1 when the ring holds fewer
// than n hosts: the draws a hedge starting there needs to reach a host not
// among the n-1 already tried.
func (r *HashRing) Reach(i, n int) int {
	var seen []string
	for step := range len(r.hosts) {
		if h := r.hosts[(i+step)%len(r.hosts)]; !slices.Contains(seen, h) {
			seen = append(seen, h)
			if len(seen) == n {
				return step
			}
		}
	}
	return -1
}
