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

// slot counts one second of an account's window.
type slot struct {
	second              int64
	requests, committed int64
}

// account is one policy's window on one worker (each Envoy worker runs its
// own VM, so its own accounts).
type account struct {
	window, generation, now int64
	slots                   []slot
	requests, committed     int64
	dropped                 bool
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
// commits the hedges it may have: as many as fit (at most t.Hedges) while the
// window's committed hedges stay within t.Ratio of the window's requests.
func (as *Accounts) Admit(now int64, t Terms) (Grant, Commitment) {
	a := as.account(t)
	sl := a.advance(now)
	sl.requests++
	a.requests++
	left := t.Ratio*float64(a.requests) - float64(a.committed)
	fit := min(t.Hedges, int64(math.Floor(left)))
	if fit < 1 {
		return Grant{}, Commitment{}
	}
	sl.committed += fit
	a.committed += fit
	g := Grant{Hedges: fit, CapRetries: fit < t.Retries, Late: left-float64(fit) < float64(t.LateBelow)}
	return g, Commitment{acct: a, generation: a.generation, second: sl.second, hedges: fit}
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
		a = &account{window: t.Window, generation: as.generation, slots: make([]slot, t.Window)}
		for i := range a.slots {
			a.slots[i].second = -1
		}
		as.byName[t.Account] = a
	}
	return a
}

// advance moves the account to second now: seconds that left the window
// leave the totals, and every second since the last call gets an empty slot.
// A clock that steps back keeps counting in the latest second.
func (a *account) advance(now int64) *slot {
	if now <= a.now {
		return &a.slots[a.now%a.window]
	}
	for s := max(a.now+1, now-a.window+1); s <= now; s++ {
		sl := &a.slots[s%a.window]
		a.requests -= sl.requests
		a.committed -= sl.committed
		*sl = slot{second: s}
	}
	a.now = now
	return &a.slots[now%a.window]
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
// while it is still in the window. It returns how many went back.
func (c *Commitment) Settle(attempts int64) int64 {
	a := c.acct
	c.acct = nil
	if a == nil || a.dropped || a.generation != c.generation {
		return 0
	}
	unused := c.hedges - min(c.hedges, max(attempts-1, 0))
	sl := &a.slots[c.second%a.window]
	if unused <= 0 || sl.second != c.second {
		return 0
	}
	sl.committed -= unused
	a.committed -= unused
	return unused
}

// Committed is the account's committed hedges and requests in its window, for
// tests.
func (as *Accounts) Committed(name string) (committed, requests int64) {
	if a := as.byName[name]; a != nil {
		return a.committed, a.requests
	}
	return 0, 0
}
