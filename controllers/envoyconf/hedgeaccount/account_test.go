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

import (
	"encoding/binary"
	"math"
	"testing"
)

// terms are a 5% budget over 30 s, one hedge, late below 5 hedges left.
var terms = Terms{Account: "shop/web", Ratio: 0.05, Window: 30, Hedges: 1, LateBelow: 5, LateMs: 30, Retries: 1}

// answered sends n requests at second now that are answered unhedged.
func answered(as *Accounts, now int64, t Terms, n int) {
	for range n {
		_, c := as.Admit(now, t)
		c.Settle(1)
	}
}

func TestAdmitKeepsHedgesWithinTheBudget(t *testing.T) {
	as := NewAccounts()
	// The first request of a window fits no hedge: 5% of 1 request.
	if g, _ := as.Admit(100, terms); g.Hedges != 0 {
		t.Fatalf("first request: %+v, want no hedge", g)
	}
	answered(as, 100, terms, 199)
	// 200 requests in, none hedged: 10 hedges fit; taking one leaves 9,
	// not fewer than 5, so at the delay.
	g, c := as.Admit(100, terms)
	if g != (Grant{Hedges: 1}) {
		t.Fatalf("after 200 answered requests: %+v, want one hedge at the delay", g)
	}
	// Requests that keep their hedge (Envoy sent it) use the budget up:
	// 201 requests allow 10.05 hedges.
	c.Settle(2)
	var granted, late int
	for range 9 {
		g, c := as.Admit(100, terms)
		if g.Hedges > 0 {
			granted++
		}
		if g.Late {
			late++
		}
		c.Settle(2)
	}
	if committed, requests := as.Committed("shop/web"); committed != 10 || requests != 210 {
		t.Errorf("window holds %d hedges for %d requests, want 10 for 210", committed, requests)
	}
	if granted != 9 || late != 5 {
		t.Errorf("9 more requests: %d hedged, %d late; want 9 hedged, the last 5 late (fewer than 5 left)", granted, late)
	}
	if g, _ := as.Admit(100, terms); g.Hedges != 0 {
		t.Errorf("budget spent: %+v, want no hedge", g)
	}
}

// TestCancelledRequestsGiveTheirHedgesBack is #23's defect 2: a request its
// client resets never answers. Its stream still ends, and its unsent hedge
// goes back; a hedge Envoy sent before the reset stays spent.
func TestCancelledRequestsGiveTheirHedgesBack(t *testing.T) {
	as := NewAccounts()
	answered(as, 100, terms, 380) // with 20 more, 20 hedges fit
	var cancelled []Commitment
	for range 20 {
		g, c := as.Admit(100, terms)
		if g.Hedges != 1 {
			t.Fatalf("want a hedge for each of 20 requests, got %+v", g)
		}
		cancelled = append(cancelled, c)
	}
	if g, _ := as.Admit(100, terms); g.Hedges != 0 {
		t.Fatalf("with 20 hedges committed to requests in flight, want no hedge; got %+v", g)
	}
	// 10 were reset before their hedge went (one attempt), 10 after it.
	for i, c := range cancelled {
		attempts := int64(1)
		if i%2 == 1 {
			attempts = 2
		}
		c.Settle(attempts)
	}
	if committed, _ := as.Committed("shop/web"); committed != 10 {
		t.Errorf("window holds %d hedges, want the 10 that were sent", committed)
	}
	// A request that never reached an upstream gives back all it took.
	g, c := as.Admit(100, terms)
	if g.Hedges != 1 {
		t.Fatalf("want a hedge, got %+v", g)
	}
	if back := c.Settle(0); back != 1 {
		t.Errorf("a stream with no upstream attempt gave back %d, want 1", back)
	}
	if back := c.Settle(0); back != 0 {
		t.Errorf("a second Settle gave back %d, want 0", back)
	}
}

func TestTheWindowSlides(t *testing.T) {
	as := NewAccounts()
	answered(as, 100, terms, 380)
	for range 20 {
		_, c := as.Admit(100, terms)
		c.Settle(2)
	}
	if g, _ := as.Admit(110, terms); g.Hedges != 0 {
		t.Fatalf("10 s later the 20 hedges of second 100 still count: want no hedge, got %+v", g)
	}
	// At 130 second 100 has left the 30 s window: its requests and hedges
	// with it, and only the one request of 110 is left.
	if g, _ := as.Admit(130, terms); g.Hedges != 0 {
		t.Errorf("at 130: %+v, want no hedge (2 requests in the window)", g)
	}
	if committed, requests := as.Committed("shop/web"); committed != 0 || requests != 2 {
		t.Errorf("at 130 the window holds %d hedges for %d requests, want 0 for 2", committed, requests)
	}
	// A hedge given back after its second left the account's history (2 x
	// 30 + 1 seconds) changes nothing.
	as2 := NewAccounts()
	answered(as2, 100, terms, 40)
	_, c := as2.Admit(100, terms)
	answered(as2, 161, terms, 40)
	if back := c.Settle(1); back != 0 {
		t.Errorf("a commitment whose second left the history gave back %d, want 0", back)
	}
}

func TestMeshRetriesCapTheHedgedRequest(t *testing.T) {
	mesh := terms
	mesh.Retries = 2
	as := NewAccounts()
	answered(as, 100, mesh, 400)
	if g, _ := as.Admit(100, mesh); g != (Grant{Hedges: 1, CapRetries: true}) {
		t.Errorf("with 2 failure retries beside 1 hedge: %+v, want the request capped at its hedge", g)
	}
}

func TestANewWindowStartsANewAccount(t *testing.T) {
	as := NewAccounts()
	answered(as, 100, terms, 400)
	_, c := as.Admit(100, terms)
	wider := terms
	wider.Window = 60
	as.Admit(100, wider)
	if back := c.Settle(1); back != 0 {
		t.Errorf("a commitment to the old window gave %d back to the new one", back)
	}
	if committed, requests := as.Committed("shop/web"); committed != 0 || requests != 1 {
		t.Errorf("the new account holds %d hedges for %d requests, want 0 for 1", committed, requests)
	}
}

func TestIdleAccountsAreDropped(t *testing.T) {
	as := NewAccounts()
	for i := range 50 {
		other := terms
		other.Account = "shop/policy-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		answered(as, 100, other, 40)
	}
	_, c := as.Admit(100, terms)
	as.Sweep(130)
	if as.Len() != 51 {
		t.Fatalf("one window on: %d accounts, want all 51", as.Len())
	}
	as.Admit(150, terms)
	as.Sweep(161)
	if as.Len() != 1 {
		t.Errorf("two windows after their last request: %d accounts, want 1 (the one in use)", as.Len())
	}
	as.Sweep(300)
	if as.Len() != 0 {
		t.Errorf("all idle: %d accounts, want 0", as.Len())
	}
	if back := c.Settle(1); back != 0 {
		t.Errorf("a commitment to a dropped account gave back %d", back)
	}
}

// encodePairs serializes a map as Envoy's proxy_get_property does.
func encodePairs(pairs [][2][]byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(pairs)))
	for _, p := range pairs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[1])))
	}
	for _, p := range pairs {
		b = append(append(append(b, p[0]...), 0), append(p[1], 0)...)
	}
	return b
}

func num(f float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)) }

func TestTermsFromMetadata(t *testing.T) {
	full := [][2][]byte{
		{[]byte("account"), []byte("shop/web")}, {[]byte("ratio"), num(0.05)}, {[]byte("window"), num(30)},
		{[]byte("hedges"), num(1)}, {[]byte("late_below"), num(5)}, {[]byte("late_ms"), num(30)},
	}
	got, ok := TermsFromMetadata(encodePairs(full))
	if !ok || got != terms {
		t.Errorf("got %+v %v, want %+v", got, ok, terms)
	}
	withRetries := append(append([][2][]byte{}, full...), [2][]byte{[]byte("retries"), num(2)})
	if got, ok := TermsFromMetadata(encodePairs(withRetries)); !ok || got.Retries != 2 {
		t.Errorf("with retries 2: %+v %v", got, ok)
	}
	// A static YAML config keeps a fraction as a string.
	yamlRatio := append([][2][]byte{}, full...)
	yamlRatio[1][1] = []byte("0.05")
	if got, ok := TermsFromMetadata(encodePairs(yamlRatio)); !ok || got.Ratio != 0.05 {
		t.Errorf("ratio as the string 0.05: %+v %v", got, ok)
	}
	for name, b := range map[string][]byte{
		"owned route":   encodePairs([][2][]byte{{[]byte("owned"), {1}}}),
		"no late_ms":    encodePairs(full[:5]),
		"empty":         nil,
		"truncated":     encodePairs(full)[:40],
		"count too big": binary.LittleEndian.AppendUint32(nil, 1<<30),
		"zero window":   encodePairs(append(append([][2][]byte{}, full[:2]...), append([][2][]byte{{[]byte("window"), num(0)}}, full[3:]...)...)),
	} {
		if got, ok := TermsFromMetadata(b); ok {
			t.Errorf("%s: got terms %+v, want none", name, got)
		}
	}
}

// TestNoStretchGoesOverTheBudget is #26's overshoot: with the window's hedges
// checked against the window's requests only, a stretch that starts before
// a cluster of slow requests spent what the quiet seconds before it left
// unused, and a minute of the A/B measured 5.09% under a 5% budget. Here 200
// requests a second arrive for 240 s: for 60 s none is slow, then every
// request that gets a hedge keeps it (Envoy sent it), then one in ten. Every
// stretch of whole seconds s..e from 31 to 61 seconds long must hold at
// most 5% of the requests of s+1..e in hedges: the proof that any stretch of
// 30 s or more, wherever it starts in a second, holds at most 5% of its
// own. Expected values are the budget's arithmetic, not the account's.
func TestNoStretchGoesOverTheBudget(t *testing.T) {
	as := NewAccounts()
	const seconds, rate = 240, 200
	var requests, hedges [seconds]int64
	for sec := range int64(seconds) {
		for i := range rate {
			g, c := as.Admit(1_000_000+sec, terms) // seconds of a clock
			requests[sec]++
			slow := sec >= 60 && sec < 150 || sec >= 150 && i%10 == 0
			if g.Hedges > 0 && slow {
				hedges[sec] += g.Hedges
				c.Settle(1 + g.Hedges)
				continue
			}
			c.Settle(1)
		}
	}
	worst := 0.0
	for s := range seconds {
		var r, h int64
		for e := s; e < seconds && e-s+1 <= 61; e++ {
			h += hedges[e]
			if e > s {
				r += requests[e]
			}
			if e-s+1 < 31 {
				continue
			}
			if float64(h) > 0.05*float64(r)+1e-9 {
				t.Fatalf("seconds %d..%d: %d hedges for %d requests after the first second (%.2f%%), over the 5%% budget", s, e, h, r, 100*float64(h)/float64(r))
			}
			worst = max(worst, float64(h)/float64(r))
		}
	}
	var total int64
	for _, h := range hedges[60:150] {
		total += h
	}
	// While every request is slow the account hedges what the budget
	// leaves: 30/31 of 5% of 90 s of 200 requests, 871, in a steady stream.
	// Its first 30 s may fall short of that pace by what rounds down.
	if total < 850 {
		t.Errorf("every request slow for 90 s: %d hedges, want at least 850 (30/31 of the budget's 900)", total)
	}
	t.Logf("worst stretch: %.3f%% hedged; %d hedges while every request was slow", 100*worst, total)
}
