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

package estimate

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"
)

// memoryLimit bounds the estimated size of the totals the sampler keeps, a
// quarter of the chart's memory limit for the operator (256Mi).
const memoryLimit = 64 << 20

// memory is what the sampler read, for Estimate.
//
// Each cluster's totals are kept as long and as finely as the policies that
// read it need (retention), whatever the other policies ask for: a policy
// with window 1h and evaluationInterval 5s keeps its own cluster's totals for
// two hours, no one else's (issue #23: it made every cluster keep 2,880 ticks).
// Their sum is bounded by limit: when the clusters' needs add up to more,
// those that need the most entries are kept further apart (fit), all to the
// same number of entries, and their readings say so (answers.coarse).
type memory struct {
	mu    sync.RWMutex
	ticks []envoyTick // oldest first
	own   map[types.NamespacedName]ownReading
	// les are the histogram bounds met so far: a series keeps its buckets as
	// values in this order (intern).
	les     []string
	leIndex map[string]int
	// limit overrides memoryLimit (tests).
	limit int
	// coarse are the clusters kept further apart than their retention asks,
	// to fit the limit, and how far apart.
	coarse map[string]time.Duration
	// bytes is the estimated size of the totals kept (entrySize).
	bytes int
	// endpoints are the hedged clusters' per-endpoint scrapes.
	endpoints endpointHistory
}

func newMemory() *memory {
	return &memory{own: map[types.NamespacedName]ownReading{}}
}

// retention is how long and how finely memory keeps one cluster's totals.
type retention struct {
	// keep is two of the longest window among the cluster's policies (the
	// budget guard reads the window before the last), and at least two of
	// their intervals.
	keep time.Duration
	// spacing is the tick of the shortest evaluation interval among them
	// (tickFor): the totals a delay change needs by the next evaluation.
	spacing time.Duration
}

// envoyTick is every hedged cluster's cumulative totals at one tick, or the
// error that kept the sampler from reading them.
type envoyTick struct {
	at       time.Time
	err      error
	clusters map[string]*clusterTotals
}

// clusterTotals are one cluster's cumulative counts, one seriesTotals per
// proxy: about 100 numbers per cluster with the chart's 2 proxies and the 49
// buckets of xds.LatencyBucketsMs (the labels are not kept, only a hash of
// them). A reading holds one proxy's last counts per series (increase).
type clusterTotals struct {
	// series are keyed by the signature of their labels but __name__ and le
	// (notProxy).
	series map[uint64]*seriesTotals
	// scraped is when Prometheus scraped the counters (the oldest proxy's);
	// zero when unknown.
	scraped time.Time
}

// seriesTotals are one proxy's cumulative counts of one cluster.
type seriesTotals struct {
	// buckets are the histogram as read, by le; intern turns them into
	// values, by memory.les, which increase reads. NaN is a bound this
	// series did not have.
	buckets           map[string]float64
	values            []float64
	retries, attempts float64
	counters          bool // retries and attempts were read
}

// ownReading is what a Workload or Custom policy's queries answered at the
// sampler's tick at, for the span that starts at since.
type ownReading struct {
	at, since time.Time
	answers   answers
}

// add keeps a tick and forgets what no policy needs any more:
//   - the ticks older than keep, the longest retention, but for one (a span
//     starting at the edge still needs the tick before it);
//   - with retain, the clusters no policy reads, and each cluster's totals
//     older than its own keep (again but for one);
//   - a cluster's totals closer together than its spacing, or than fit
//     allows: when a tick comes, the cluster's entry before it stays only if
//     it lies a spacing or more after the one before it, or if a series
//     fell from it to the new tick. Entries lie at least a spacing apart, the
//     latest and those before a reset aside, and at most a spacing and one
//     tick: a cluster keeps about keep/spacing + 2. The entry before a reset
//     stays because a reset's increase is the counter's new value: without
//     that entry, what the proxy counted after the one before it would be
//     lost.
//
// Without retain (tests), every cluster is kept for keep, at every tick.
func (m *memory) add(t envoyTick, keep time.Duration, retain map[string]retention) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.intern(&t)
	for c := range t.clusters {
		if _, ok := retain[c]; retain != nil && !ok {
			delete(t.clusters, c)
		}
	}
	m.ticks = append(m.ticks, t)
	cut := 0
	for cut+1 < len(m.ticks) && t.at.Sub(m.ticks[cut+1].at) >= keep {
		cut++
	}
	m.ticks = slices.Delete(m.ticks, 0, cut)
	if retain == nil {
		return
	}
	held := map[string][]int{} // cluster -> the ticks that hold it
	for k, tk := range m.ticks {
		for c := range tk.clusters {
			held[c] = append(held[c], k)
		}
	}
	m.fit(held, retain)
	m.bytes = 0
	touched := map[int]bool{}
	forget := func(k int, c string) {
		delete(m.ticks[k].clusters, c)
		touched[k] = true
	}
	for c, ks := range held {
		r, ok := retain[c]
		if !ok {
			for _, k := range ks {
				forget(k, c)
			}
			continue
		}
		spacing := max(r.spacing, m.coarse[c])
		var kept []int
		for n, k := range ks {
			if n+1 < len(ks) && t.at.Sub(m.ticks[ks[n+1]].at) >= r.keep {
				forget(k, c)
				continue
			}
			if l := len(kept); l >= 2 && m.ticks[kept[l-1]].at.Sub(m.ticks[kept[l-2]].at) < spacing &&
				!resetBetween(m.ticks[kept[l-1]].clusters[c], m.ticks[k].clusters[c]) {
				forget(kept[l-1], c)
				kept = kept[:l-1]
			}
			kept = append(kept, k)
		}
		for _, k := range kept {
			m.bytes += entrySize(m.ticks[k].clusters[c])
		}
	}
	// A Go map keeps its size when entries leave it: a tick that held 50
	// clusters and now holds one would keep the room for 50.
	// (maps.Clone keeps it too.)
	for k := range touched {
		small := make(map[string]*clusterTotals, len(m.ticks[k].clusters))
		for c, ct := range m.ticks[k].clusters {
			small[c] = ct
		}
		m.ticks[k].clusters = small
	}
	samplerMemoryBytes.Set(float64(m.bytes))
}

// resetBetween says whether a series of the cluster fell from one entry to
// the next: its proxy restarted.
func resetBetween(from, to *clusterTotals) bool {
	for id, s := range to.series {
		f, ok := from.series[id]
		if !ok {
			continue
		}
		if s.counters && f.counters && (s.attempts < f.attempts || s.retries < f.retries) {
			return true
		}
		for b, v := range s.values {
			if b < len(f.values) && v < f.values[b] {
				return true
			}
		}
	}
	return false
}

// fit sets coarse: nothing when every cluster's entries, as its retention
// asks for them, fit the limit; otherwise the most entries any cluster may
// keep, the same for all that need more, and their spacing to keep no more.
// Each cluster's entry is as large as its latest.
func (m *memory) fit(held map[string][]int, retain map[string]retention) {
	limit := m.limit
	if limit <= 0 {
		limit = memoryLimit
	}
	type need struct {
		entries, size int
		keep          time.Duration
	}
	needs := map[string]need{}
	most, total := 0, 0
	for c, ks := range held {
		r, ok := retain[c]
		if !ok || r.spacing <= 0 {
			continue
		}
		n := need{entries: int(r.keep/r.spacing) + 2, size: entrySize(m.ticks[ks[len(ks)-1]].clusters[c]), keep: r.keep}
		needs[c] = n
		most, total = max(most, n.entries), total+n.entries*n.size
	}
	m.coarse = nil
	if total <= limit {
		return
	}
	within := func(cap int) bool {
		sum := 0
		for _, n := range needs {
			sum += min(n.entries, cap) * n.size
		}
		return sum <= limit
	}
	// The largest cap that fits; at least minEntries, which may not.
	const minEntries = 8
	lo, hi := minEntries, most
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if within(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	m.coarse = map[string]time.Duration{}
	for c, n := range needs {
		if n.entries > lo {
			m.coarse[c] = n.keep / time.Duration(lo-2)
		}
	}
}

// entrySize estimates the bytes one cluster's totals take at one tick: the
// numbers, and the maps and slices that hold them.
func entrySize(c *clusterTotals) int {
	size := 256
	for _, s := range c.series {
		size += 160 + 8*len(s.values)
	}
	return size
}

// intern turns the tick's bucket maps into values by memory.les, a third of
// their size.
func (m *memory) intern(t *envoyTick) {
	if m.leIndex == nil {
		m.leIndex = map[string]int{}
	}
	for _, c := range t.clusters {
		for _, s := range c.series {
			if s.buckets == nil {
				continue
			}
			for le := range s.buckets {
				if _, ok := m.leIndex[le]; !ok {
					m.leIndex[le] = len(m.les)
					m.les = append(m.les, le)
				}
			}
			s.values = make([]float64, len(m.les))
			for i := range s.values {
				s.values[i] = math.NaN()
			}
			for le, v := range s.buckets {
				s.values[m.leIndex[le]] = v
			}
			s.buckets = nil
		}
	}
}

func (m *memory) setOwn(key types.NamespacedName, r ownReading) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.own[key] = r
}

func (m *memory) setEndpoints(now time.Time, scrapes map[string]map[endpointSeries][]endpointScrape) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endpoints = endpointHistory{read: now, byCluster: scrapes}
}

// endpointLoads is the cluster's per-endpoint loads over the scrapes held,
// unless the last reading is maxAge old or older at now.
func (m *memory) endpointLoads(cluster string, now time.Time, maxAge time.Duration) []endpointLoad {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if now.Sub(m.endpoints.read) >= maxAge {
		return nil
	}
	return m.endpoints.loads(cluster)
}

// ownAnswers returns what a Workload or Custom policy's queries answered at
// the sampler's last tick for it, and when.
func (m *memory) ownAnswers(key types.NamespacedName) (ownReading, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.own[key]
	return r, ok
}

// envoyAnswers computes a cluster's readings from the ticks: over the span
// since sp.since (adjusted to the ticks it covers), and, when the guard needs
// them, over the window that ended one window ago and the last interval. ok
// is false until two ticks cover the span and one of the cluster's series was
// seen at two of them.
func (m *memory) envoyAnswers(cluster string, sp span, window, interval time.Duration) (answers, span, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := len(m.ticks)
	if n < 2 {
		return answers{}, sp, false
	}
	latest := m.ticks[n-1]
	if latest.err != nil {
		a := answer{err: latest.err}
		return answers{buckets: a, retries: a, attempts: a}, sp, true
	}
	if latest.clusters[cluster] == nil {
		// No series for the cluster now: Envoy has not served the route,
		// or Prometheus does not scrape it.
		for k, tk := range m.ticks[:n-1] {
			if tk.err == nil && !tk.at.Before(sp.since) {
				sp.since = m.ticks[k].at
				none := answer{v: model.Vector{}}
				return answers{buckets: none, retries: none, attempts: none}, sp, true
			}
		}
		return answers{}, sp, false
	}
	from := m.firstScrapedAfter(cluster, sp.since)
	if from < 0 || from >= n-1 {
		return answers{}, sp, false
	}
	// The span's start is the tick it is read from; its length stays the one
	// asked for, so that messages do not change while memory fills up.
	sp.since = m.ticks[from].at
	a, measured := m.increase(cluster, from, n-1)
	if !measured {
		return answers{}, sp, false
	}
	histogram := func(i, j int) answer {
		h, _ := m.increase(cluster, i, j)
		return h.buckets
	}
	for k, good := from, from; k < n; k++ {
		if k > good && m.ticks[k].err == nil && m.ticks[k].clusters[cluster] != nil {
			a.parts = append(a.parts, histogram(good, k))
			good = k
		}
	}
	before := func(d time.Duration) int { return m.before(cluster, latest.at.Add(-d)) }
	a.prev = histogram(before(2*window), before(window))
	a.last = histogram(before(interval), n-1)
	a.earlier = histogram(before(2*interval), before(interval))
	a.coarse = m.coarse[cluster]
	return a, sp, true
}

// firstScrapedAfter is the index of the first good tick that holds the
// cluster as scraped at or after t (by the tick's time when the scrape time is
// unknown), or, when memory of the cluster begins after t, of its oldest tick;
// -1 when there is none yet.
func (m *memory) firstScrapedAfter(cluster string, t time.Time) int {
	oldest := true
	for j, tk := range m.ticks {
		c := tk.clusters[cluster]
		if tk.err != nil || c == nil {
			continue
		}
		at := tk.at
		if !c.scraped.IsZero() {
			at = c.scraped
		}
		if oldest && tk.at.After(t) || !at.Before(t) {
			return j
		}
		oldest = false
	}
	return -1
}

// before is the index of the last good tick at or before t that holds the
// cluster, or of the oldest that holds it (0 when none does).
func (m *memory) before(cluster string, t time.Time) int {
	i := -1
	for j, tk := range m.ticks {
		if tk.err != nil || tk.clusters[cluster] == nil {
			continue
		}
		if i >= 0 && tk.at.After(t) {
			break
		}
		i = j
	}
	return max(i, 0)
}

// increase sums a cluster's increases from tick i to tick j, skipping ticks
// that failed. It reads each series (each proxy's histogram, each proxy's
// counters) on its own, and sums the increases afterwards:
//
//   - A series' increase at a tick is from its value at the last tick in
//     [i, j] that had it. A series missing from some ticks (a missed scrape,
//     which Prometheus marks stale, or a proxy not scraped for a while) and
//     back later counts its increase since it was last seen, once.
//   - A series whose value fell was reset (its proxy restarted): its later
//     value is its increase, as Prometheus' increase() counts it. A proxy's
//     histogram is reset as a whole when any of its buckets fell, its
//     counters when either fell.
//   - A series' first sample in [i, j] is its baseline: it counts nothing
//     for the time before it, not even when it appears after tick i. What it
//     counted before may be a new proxy's first requests, or a lifetime
//     hedged at older delays (a proxy that was not scraped when the span
//     began, or that memory had lost); no sample tells them apart. Counting
//     a lifetime misjudges the delay (issue #23); leaving out a new proxy's
//     requests before its first scrape only makes the reading smaller, and
//     its histogram and counters alike.
//
// measured is false when no series of the cluster was seen twice: the
// cluster's series are all new (a new route, or every proxy replaced) and
// nothing has been measured yet. The reading needs, beside the ticks, one
// last value per series.
func (m *memory) increase(cluster string, i, j int) (a answers, measured bool) {
	if i >= j {
		return answers{buckets: answer{err: errEmptyCDF}}, true
	}
	buckets := make([]float64, len(m.les))
	present := make([]bool, len(m.les))
	var retries, attempts float64
	var counters bool
	lastBuckets := map[uint64][]float64{}
	lastCounters := map[uint64]*seriesTotals{}
	seen := false
	for k := i; k <= j; k++ {
		tk := m.ticks[k]
		if tk.err != nil {
			continue
		}
		cur := tk.clusters[cluster]
		if cur == nil {
			continue
		}
		seen = seen || k == j
		for id, s := range cur.series {
			if s.values != nil {
				if prev, ok := lastBuckets[id]; ok {
					reset := false
					for b, v := range s.values {
						reset = reset || b < len(prev) && v < prev[b]
					}
					for b, v := range s.values {
						if !reset && b < len(prev) && !math.IsNaN(prev[b]) {
							v -= prev[b]
						}
						if !math.IsNaN(v) {
							buckets[b] += v
							present[b] = true
						}
					}
					measured = true
				}
				lastBuckets[id] = s.values
			}
			if s.counters {
				if prev, ok := lastCounters[id]; ok {
					r, n := s.retries, s.attempts
					if r >= prev.retries && n >= prev.attempts {
						r, n = r-prev.retries, n-prev.attempts
					}
					retries, attempts, counters = retries+r, attempts+n, true
					measured = true
				}
				lastCounters[id] = s
			}
		}
	}
	if !seen {
		// No series for the cluster now: Envoy has not served the route,
		// or Prometheus does not scrape it.
		return answers{buckets: answer{v: model.Vector{}}, retries: answer{v: model.Vector{}}, attempts: answer{v: model.Vector{}}}, true
	}
	var vec model.Vector
	for b, v := range buckets {
		if present[b] {
			vec = append(vec, &model.Sample{Metric: model.Metric{model.BucketLabel: model.LabelValue(m.les[b])}, Value: model.SampleValue(v)})
		}
	}
	a = answers{buckets: answer{v: vec}, retries: answer{v: model.Vector{}}, attempts: answer{v: model.Vector{}}}
	if counters {
		a.retries.v = model.Vector{{Value: model.SampleValue(retries)}}
		a.attempts.v = model.Vector{{Value: model.SampleValue(attempts)}}
	}
	return a, measured
}
