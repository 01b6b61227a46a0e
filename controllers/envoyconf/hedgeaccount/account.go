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

package main

import "math"

// Terms are an account's terms, from the hedged route's metadata
// (xds.HedgeAccount): the budget's share, the window, and how hedges are
// handed out.
type Terms struct {
	// Account names the policy's account ("ns/name").
	Account string
	// Ratio is the share of the window's requests that may be hedged.
	Ratio float64
	// Window is the sliding window, in whole seconds.
	Window int64
	// Hedges is the policy's maxHedges: the most a request is given.
	Hedges int64
	// LateBelow: a request that would leave fewer hedges than this in the
	// window is hedged late, after LateMs instead of the delay.
	LateBelow, LateMs int64
	// Retries is the route's num_retries; where it exceeds the hedges (a
	// mesh's failure retries), a hedged request is capped at its hedges.
	Retries int64
}

// Grant is what the account gives a request.
type Grant struct {
	// Hedges Envoy may send for it; 0: none (no per-try timeout).
	Hedges int64
	// CapRetries: the request leaves with x-envoy-max-retries: Hedges,
	// since Envoy counts hedges and failure retries alike.
	CapRetries bool
	// Late: the request is hedged after Terms.LateMs, not the delay.
	Late bool
}

// slot counts one second of an account's history.
type slot struct {
	second              int64
	requests, committed int64
}

// account is one policy's history on one worker (each Envoy worker runs its
// own VM, so its own accounts). It keeps the last 2 x window + 1 seconds.
//
// A request may be hedged only while, for every stretch of the last k whole
// seconds with k from window+1 to 2 x window+1 (the current second counted
// whole), the hedges committed in the stretch, its own included, stay within
// Ratio of the requests of the stretch's newest k-1 seconds. So any stretch
// of time from window to 2 x window seconds long, wherever it starts, holds
// no more hedges than Ratio of its requests: at its last hedge, the stretch
// of whole seconds from the one it starts in covers its hedges, and the
// requests that stretch is credited with exclude that first, partial
// second. Longer stretches are made of such stretches. A check over the
// last window seconds alone let a stretch that starts before a cluster of
// slow requests spend what the seconds before it left unused: 5.09% of a
// minute's requests under a 5% budget (#26). The cost is the first second:
// in a steady stream at most Ratio x window/(window+1) is hedged (4.84% of a
// 5% budget over 30 s).
type account struct {
	window, generation, now int64
	slots                   []slot // by second mod len(slots)
	// earlier is the least, over the stretches, of what the seconds before
	// the current one leave to hedge; stale when a hedge came back to one of
	// them.
	earlier float64
	stale   bool
	dropped bool
}

// Commitment is what a request took from its account: its hedges, committed
// in the second it arrived. It is settled once, when the stream ends.
type Commitment struct {
	acct               *account
	generation, second int64
	hedges             int64
}

// Accounts are a worker's accounts, by name.
type Accounts struct {
	byName     map[string]*account
	generation int64
	swept      int64
}

// NewAccounts returns a worker's empty set of accounts.
func NewAccounts() *Accounts { return &Accounts{byName: map[string]*account{}} }

// Len is how many accounts are held.
func (as *Accounts) Len() int { return len(as.byName) }

// Admit counts a request that arrived at second now on t's account and
// commits the hedges it may have: as many as fit (at most t.Hedges) while
// every stretch keeps its hedges within t.Ratio of its requests (account).
func (as *Accounts) Admit(now int64, t Terms) (Grant, Commitment) {
	a := as.account(t)
	cur := a.advance(now, t.Ratio)
	cur.requests++
	left := a.earlier + t.Ratio*float64(cur.requests) - float64(cur.committed)
	fit := min(t.Hedges, int64(math.Floor(left)))
	if fit < 1 {
		return Grant{}, Commitment{}
	}
	cur.committed += fit
	g := Grant{Hedges: fit, CapRetries: fit < t.Retries, Late: left-float64(fit) < float64(t.LateBelow)}
	return g, Commitment{acct: a, generation: a.generation, second: cur.second, hedges: fit}
}

// account returns t's account, new when its window changed: a new window
// cannot take back what the old one committed.
func (as *Accounts) account(t Terms) *account {
	a := as.byName[t.Account]
	if a == nil || a.window != t.Window {
		if a != nil {
			a.dropped = true
		}
		as.generation++
		a = &account{window: t.Window, generation: as.generation, slots: make([]slot, 2*t.Window+1)}
		for i := range a.slots {
			a.slots[i].second = -1
		}
		as.byName[t.Account] = a
	}
	return a
}

// at is the slot of second s, or nil when s is not in the history.
func (a *account) at(s int64) *slot {
	if s < 0 {
		return nil
	}
	if sl := &a.slots[s%int64(len(a.slots))]; sl.second == s {
		return sl
	}
	return nil
}

// advance moves the account to second now, giving every second since the
// last call an empty slot, and returns the current second's slot. A clock
// that steps back keeps counting in the latest second.
func (a *account) advance(now int64, ratio float64) *slot {
	if now > a.now {
		for s := max(a.now+1, now-int64(len(a.slots))+1); s <= now; s++ {
			a.slots[s%int64(len(a.slots))] = slot{second: s}
		}
		a.now = now
		a.stale = true
	}
	if a.stale {
		a.earlier = a.credit(ratio)
		a.stale = false
	}
	return &a.slots[a.now%int64(len(a.slots))]
}

// credit is the least, over the stretches of k seconds (k from window+1 to
// 2 x window+1, the current second the newest), of Ratio x the requests of
// the stretch's seconds before the current one but its first, less the
// hedges committed in them: what the earlier seconds leave to hedge.
func (a *account) credit(ratio float64) float64 {
	var requests, committed int64
	least := math.Inf(1)
	for age := int64(1); age <= 2*a.window; age++ {
		// The stretch of age+1 seconds starts at age: its hedges count, its
		// requests do not.
		if sl := a.at(a.now - age); sl != nil {
			committed += sl.committed
			if age >= a.window {
				least = min(least, ratio*float64(requests)-float64(committed))
			}
			requests += sl.requests
			continue
		}
		if age >= a.window {
			least = min(least, ratio*float64(requests)-float64(committed))
		}
	}
	return least
}

// Sweep drops, once a second, the accounts that saw no request for two
// windows, so that accounts of deleted policies do not pile up for as long
// as Envoy runs.
func (as *Accounts) Sweep(now int64) {
	if now <= as.swept {
		return
	}
	as.swept = now
	for name, a := range as.byName {
		if a.now < now-2*a.window {
			a.dropped = true
			delete(as.byName, name)
		}
	}
}

// Settle gives back the hedges Envoy did not send for a stream that ended
// after attempts upstream attempts (attempts-1 hedges were sent; 0 when the
// request never reached an upstream). It runs when the stream ends, answered
// or reset by its client: a cancelled request's unsent hedges come back as an
// answered one's do. Hedges go back to the second they were committed in,
// while it is still in the account's history. It returns how many went back.
func (c *Commitment) Settle(attempts int64) int64 {
	a := c.acct
	c.acct = nil
	if a == nil || a.dropped || a.generation != c.generation {
		return 0
	}
	unused := c.hedges - min(c.hedges, max(attempts-1, 0))
	sl := a.at(c.second)
	if unused <= 0 || sl == nil {
		return 0
	}
	sl.committed -= unused
	if c.second != a.now {
		a.stale = true
	}
	return unused
}

// Committed is the account's committed hedges and requests in its last
// window seconds, for tests.
func (as *Accounts) Committed(name string) (committed, requests int64) {
	a := as.byName[name]
	if a == nil {
		return 0, 0
	}
	for age := range a.window {
		if sl := a.at(a.now - age); sl != nil {
			committed += sl.committed
			requests += sl.requests
		}
	}
	return committed, requests
}
