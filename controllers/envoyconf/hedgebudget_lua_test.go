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

package envoyconf

import (
	"fmt"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// luaHandles stands in for Envoy's stream handles: a route's metadata, the
// headers, and the stream's dynamic metadata, with os.time() set by the test.
// The account's arithmetic and bookkeeping run here, in Lua 5.1 as in
// Envoy's LuaJIT; the Envoy tests (hedgebudget_test.go) run the same script
// in Envoy.
const luaHandles = `
now = 0
os.time = function() return now end

function stream(md, hdrs)
  local h = {md = md, hdrs = hdrs, dyn = {}}
  local headers = {
    get = function(_, k) return h.hdrs[k] end,
    add = function(_, k, v) h.hdrs[k] = v end,
    replace = function(_, k, v) h.hdrs[k] = v end,
    remove = function(_, k) h.hdrs[k] = nil end,
  }
  local dynamic = {
    set = function(_, f, k, v) h.dyn[f] = h.dyn[f] or {}; h.dyn[f][k] = v end,
    get = function(_, f) return h.dyn[f] end,
  }
  local info = {dynamicMetadata = function() return dynamic end}
  local metadata = {get = function(_, k) return h.md[k] end}
  h.metadata = function() return metadata end
  h.headers = function() return headers end
  h.streamInfo = function() return info end
  return h
end

function terms(account)
  return {account = account, ratio = 0.05, window = 30, hedges = 1, late_below = 5, late_ms = 30}
end

-- answered sends n requests on a route with metadata md, each answered
-- after one attempt.
function answered(md, n)
  for i = 1, n do
    local s = stream(md, {})
    envoy_on_request(s)
    s.hdrs = {["x-envoy-attempt-count"] = "1"}
    envoy_on_response(s)
  end
end

-- accountsHeld counts the accounts the script keeps (its local "accounts").
function accountsHeld()
  local i = 1
  while true do
    local name, value = debug.getupvalue(envoy_on_request, i)
    if name == nil then return -1 end
    if name == "sweep" then
      local j = 1
      while true do
        local n, v = debug.getupvalue(value, j)
        if n == nil then return -1 end
        if n == "accounts" then
          local c = 0
          for _ in pairs(v) do c = c + 1 end
          return c
        end
        j = j + 1
      end
    end
    i = i + 1
  end
end
`

func newLuaAccount(t *testing.T) *lua.LState {
	t.Helper()
	L := lua.NewState()
	t.Cleanup(L.Close)
	if err := L.DoString(luaHandles); err != nil {
		t.Fatal(err)
	}
	if err := L.DoString(hedgeBudgetLua); err != nil {
		t.Fatal(err)
	}
	return L
}

func doLua(t *testing.T, L *lua.LState, code string) lua.LValue {
	t.Helper()
	if err := L.DoString(code); err != nil {
		t.Fatalf("%s: %v", code, err)
	}
	return L.GetGlobal("result")
}

// TestAccountsOfGonePoliciesAreDropped is #23's defect 10: each worker kept
// an account for every policy it had seen, for as long as Envoy ran. An
// account that saw no request for two windows is dropped.
func TestAccountsOfGonePoliciesAreDropped(t *testing.T) {
	L := newLuaAccount(t)
	doLua(t, L, `
now = 1000
for i = 1, 50 do
  local s = stream(terms("ns/policy-" .. i), {})
  envoy_on_request(s)
  envoy_on_response(s)
end
result = accountsHeld()`)
	if got := L.GetGlobal("result"); got.String() != "50" {
		t.Fatalf("accounts held after 50 policies' requests: %s, want 50", got)
	}
	// One window on, only policy-1 still has traffic: nothing is dropped
	// yet. Two windows after their last request, the other 49 are.
	for _, tc := range []struct {
		at   int
		want string
	}{{1030, "50"}, {1060, "50"}, {1061, "1"}} {
		got := doLua(t, L, fmt.Sprintf(`
now = %d
local s = stream(terms("ns/policy-1"), {})
envoy_on_request(s)
envoy_on_response(s)
result = accountsHeld()`, tc.at))
		if got.String() != tc.want {
			t.Errorf("at +%ds: %s accounts held, want %s", tc.at-1000, got, tc.want)
		}
	}
}

// TestAccountOwnsRetryHeaders is #23's defects 7 and 2 (the failure
// retries): on an accounted route the client's retry and timeout headers
// never reach the router, and a request the account cannot hedge keeps the
// route's failure retries (per-try timeout 0: no hedge), where
// x-envoy-max-retries: 0 took them away.
func TestAccountOwnsRetryHeaders(t *testing.T) {
	L := newLuaAccount(t)
	hostile := `{["x-envoy-max-retries"] = "10", ["x-envoy-upstream-rq-per-try-timeout-ms"] = "1",
  ["x-envoy-retry-on"] = "5xx", ["x-envoy-retry-grpc-on"] = "unavailable", ["x-envoy-hedge-on-per-try-timeout"] = "true"}`
	show := `
local function show(h)
  return string.format("max-retries=%s per-try=%s retry-on=%s retry-grpc-on=%s hedge-on-per-try=%s",
    tostring(h["x-envoy-max-retries"]), tostring(h["x-envoy-upstream-rq-per-try-timeout-ms"]),
    tostring(h["x-envoy-retry-on"]), tostring(h["x-envoy-retry-grpc-on"]), tostring(h["x-envoy-hedge-on-per-try-timeout"]))
end`
	// The first request of a window fits no hedge (5% of 1 request).
	got := doLua(t, L, show+`
now = 2000
local s = stream(terms("ns/web"), `+hostile+`)
envoy_on_request(s)
result = show(s.hdrs)`)
	if want := "max-retries=nil per-try=0 retry-on=nil retry-grpc-on=nil hedge-on-per-try=nil"; got.String() != want {
		t.Errorf("a request that fits no hedge leaves with %s, want %s", got, want)
	}
	// With 200 requests in, answered unhedged, a request fits its hedge at
	// the delay: the route's retries and per-try timeout, nothing of the
	// client's.
	got = doLua(t, L, show+`
answered(terms("ns/web"), 200)
local s = stream(terms("ns/web"), `+hostile+`)
envoy_on_request(s)
result = show(s.hdrs)`)
	if want := "max-retries=nil per-try=nil retry-on=nil retry-grpc-on=nil hedge-on-per-try=nil"; got.String() != want {
		t.Errorf("a hedged request leaves with %s, want %s", got, want)
	}
	// A route without the account's terms is not the account's: untouched.
	got = doLua(t, L, show+`
local s = stream({}, `+hostile+`)
envoy_on_request(s)
result = show(s.hdrs)`)
	if want := "max-retries=10 per-try=1 retry-on=5xx retry-grpc-on=unavailable hedge-on-per-try=true"; got.String() != want {
		t.Errorf("a request on another route leaves with %s, want it untouched: %s", got, want)
	}
}

// TestMeshRetriesStayBesideTheHedge is #23's defect 4 in the account: on a
// mesh the hedged route keeps the mesh's two failure retries (retries 2)
// beside one hedge. A request the account hedges leaves capped at its hedge
// (Envoy counts hedges and retries together); one it cannot hedge keeps the
// route's two retries, with no per-try timeout to hedge on.
func TestMeshRetriesStayBesideTheHedge(t *testing.T) {
	L := newLuaAccount(t)
	got := doLua(t, L, `
now = 4000
local function mesh(account)
  local t = terms(account)
  t.retries = 2
  return t
end
local first = stream(mesh("ns/mesh"), {})
envoy_on_request(first)
answered(mesh("ns/mesh"), 200)
local hedged = stream(mesh("ns/mesh"), {})
envoy_on_request(hedged)
result = string.format("not hedged: max-retries=%s per-try=%s; hedged: max-retries=%s per-try=%s",
  tostring(first.hdrs["x-envoy-max-retries"]), tostring(first.hdrs["x-envoy-upstream-rq-per-try-timeout-ms"]),
  tostring(hedged.hdrs["x-envoy-max-retries"]), tostring(hedged.hdrs["x-envoy-upstream-rq-per-try-timeout-ms"]))`)
	if want := "not hedged: max-retries=nil per-try=0; hedged: max-retries=1 per-try=nil"; got.String() != want {
		t.Errorf("%s, want %s", got, want)
	}
}

// TestAttemptCountStaysInside is #23's defect 11: the attempt count reached
// clients on tailcut's routes without an account. The filter removes it on
// every route tailcut owns, and leaves other routes' answers alone.
func TestAttemptCountStaysInside(t *testing.T) {
	L := newLuaAccount(t)
	for _, tc := range []struct{ route, want string }{
		{`terms("ns/web")`, "nil"},
		{`{owned = true}`, "nil"},
		{`{}`, "2"},
	} {
		got := doLua(t, L, `
now = 3000
local s = stream(`+tc.route+`, {})
envoy_on_request(s)
s.hdrs = {["x-envoy-attempt-count"] = "2"}
envoy_on_response(s)
result = tostring(s.hdrs["x-envoy-attempt-count"])`)
		if got.String() != tc.want {
			t.Errorf("route metadata %s: the answer's attempt count is %s, want %s", tc.route, got, tc.want)
		}
	}
}

// TestLuaNoStretchGoesOverTheBudget runs the Proxy-Wasm account's stretch
// test (hedgeaccount's TestNoStretchGoesOverTheBudget) on the Lua account:
// 200 requests a second for 240 s, none slow for 60 s, then every hedged
// request keeps its hedge for 90 s, then one in ten. Every stretch of whole
// seconds s..e, 31 to 61 seconds long, must hold at most 5% of the requests
// of s+1..e in hedges.
func TestLuaNoStretchGoesOverTheBudget(t *testing.T) {
	L := newLuaAccount(t)
	doLua(t, L, `
hedged = {}
for sec = 0, 239 do
  now = 1000000 + sec
  hedged[sec + 1] = 0
  for i = 0, 199 do
    local s = stream(terms("ns/web"), {})
    envoy_on_request(s)
    local granted = s.hdrs["x-envoy-upstream-rq-per-try-timeout-ms"] ~= "0"
    local slow = (sec >= 60 and sec < 150) or (sec >= 150 and i % 10 == 0)
    local attempts = "1"
    if granted and slow then
      hedged[sec + 1] = hedged[sec + 1] + 1
      attempts = "2"
    end
    s.hdrs = {["x-envoy-attempt-count"] = attempts}
    envoy_on_response(s)
  end
end`)
	tbl := L.GetGlobal("hedged").(*lua.LTable)
	hedges := make([]int, tbl.Len())
	for i := range hedges {
		hedges[i] = int(lua.LVAsNumber(tbl.RawGetInt(i + 1)))
	}
	total := 0
	for s := range hedges {
		if s >= 60 && s < 150 {
			total += hedges[s]
		}
		h, r := 0, 0
		for e := s; e < len(hedges) && e-s+1 <= 61; e++ {
			h += hedges[e]
			if e > s {
				r += 200
			}
			if e-s+1 >= 31 && float64(h) > 0.05*float64(r)+1e-9 {
				t.Fatalf("seconds %d..%d: %d hedges for %d requests after the first second (%.2f%%), over the 5%% budget", s, e, h, r, 100*float64(h)/float64(r))
			}
		}
	}
	if total < 850 {
		t.Errorf("every request slow for 90 s: %d hedges, want at least 850 (30/31 of the budget's 900)", total)
	}
	t.Logf("%d hedges while every request was slow", total)
}
