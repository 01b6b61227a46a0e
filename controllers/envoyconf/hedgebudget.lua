-- tailcut's hedge account on an Istio mesh: a rate cap on hedges in Envoy's
-- data path. tailcut's own Envoy runs the same account as a Proxy-Wasm module
-- (controllers/envoyconf/hedgeaccount), which also sees the streams clients reset;
-- here a request that never answers keeps its commitment for the account's
-- history (2 x window + 1 seconds).
--
-- Envoy's retry_budget does not bound hedges: a retry holds its place in the
-- budget only while it waits out its back-off (1 ms on a hedged route), not
-- while it runs. When every replica turns slow, every request passes its
-- delay, and until the operator's next estimate each one would be hedged
-- (#14, scenario 6). This filter keeps one account per policy, named by the
-- hedged route's metadata (account, ratio, window, hedges, late_below,
-- late_ms; plan.HedgeWindow and the plan's constants next to it):
--
-- * The account counts, for each of the last 2 x `window` + 1 whole seconds
--   of os.time() (the current one included), the requests that arrived and
--   the hedges committed to.
-- * A request may be hedged only if, with its own hedges, every stretch of
--   the last k seconds, k from window+1 to 2 x window+1, holds hedges within
--   `ratio` of the requests of its newest k-1 seconds. So any stretch of
--   window seconds or more, wherever it starts, holds at most `ratio` of its
--   own requests in hedges: a check of the window alone let a stretch that
--   starts before a cluster of slow requests spend what the seconds before
--   it left unused (#26). Its hedges (`hedges`, the policy's maxHedges, or
--   fewer when fewer fit) are committed when it arrives, since Envoy sends
--   them later, when the request has run past the delay. Envoy counts hedges
--   and failure retries alike against the route's num_retries (`retries`,
--   when set: on a mesh it keeps the mesh's failure retries), so a hedged
--   request leaves with x-envoy-max-retries set to its hedges when they are
--   fewer. A request that fits none
--   goes out with x-envoy-upstream-rq-per-try-timeout-ms: 0: no per-try
--   timeout, so Envoy does not hedge it, while it still retries a reset or
--   a failed connection as the route allows. (x-envoy-max-retries: 0, as
--   before, took those retries away too.)
-- * On an accounted route the filter owns Envoy's retry and timeout request
--   headers: whatever a client sent (an edge that trusts its peer passes
--   them on), each request leaves with the attempts and per-try timeout the
--   account gave it, and with no retry conditions of the client's, which
--   would send attempts the account never charged.
-- * A request that would leave fewer than `late_below` hedges in the window
--   is hedged late: after `late_ms` (x-envoy-upstream-rq-per-try-timeout-ms)
--   instead of the delay. When the slow share equals the budget, hedges of
--   fast requests that ran a little past the delay would take the slow
--   requests' places; late, they are not sent, and the slow requests are
--   hedged half a delay later.
-- * When the answer comes, the hedges Envoy did not send
--   (x-envoy-attempt-count, which the filter then removes) are given back to
--   the second they were committed in, if it is still in the history. The
--   filter removes the attempt count from the answers of tailcut's other
--   routes too (metadata `owned`).
--
-- A commitment whose answer never comes stays for the account's history.
-- In a steady stream at most `ratio` x window/(window+1) is hedged: the
-- first second of each stretch pays for nothing.

-- Lua state is per worker thread: each worker keeps its own accounts, and
-- each holds the ratio for its own requests. An account that saw no request
-- for two windows holds nothing and is dropped, so that accounts of deleted
-- policies do not pile up for as long as Envoy runs. Route metadata is read under the
-- filter's own name: tailcut's Envoy has one filter for every policy, and in
-- an Istio mesh each policy's EnvoyFilter inserts a filter of its own, which
-- acts only on its policy's routes. Dynamic metadata stays under FILTER. A route without complete
-- metadata has no account (an upgrade can pair this script with an older
-- operator's routes for a moment): its requests pass unchanged.

-- FILTER is HedgeBudgetFilter in hedgebudget.go.
local FILTER = "tailcut.hedge_budget"
local FIELDS = {"account", "ratio", "window", "hedges", "late_below", "late_ms"}
local accounts = {}
local generation = 0
local swept = 0

-- CLIENT_HEADERS are the request headers by which a client changes Envoy's
-- retries; on accounted routes only the account sets them.
local CLIENT_HEADERS = {"x-envoy-max-retries", "x-envoy-upstream-rq-per-try-timeout-ms",
  "x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-hedge-on-per-try-timeout"}

local function account(handle)
  local md = handle:metadata()
  local terms = {}
  for _, field in ipairs(FIELDS) do
    terms[field] = md:get(field)
    if terms[field] == nil then
      return nil
    end
  end
  terms.retries = md:get("retries") or terms.hedges
  local a = accounts[terms.account]
  if a == nil or a.window ~= terms.window then
    -- A new window cannot take back what the old one committed: answers
    -- to requests of an older account give nothing back to this one.
    generation = generation + 1
    a = {window = terms.window, size = 2 * terms.window + 1, generation = generation, now = 0,
      slots = {}, earlier = 0, stale = true}
    for i = 0, a.size - 1 do
      a.slots[i] = {second = -1, requests = 0, committed = 0}
    end
    accounts[terms.account] = a
  end
  return a, terms
end

-- at is the slot of second s, or nil when s is not in the history.
local function at(a, s)
  local slot = a.slots[s % a.size]
  if s >= 0 and slot.second == s then
    return slot
  end
  return nil
end

-- credit is the least, over the stretches of k seconds (k from window+1 to
-- 2 x window+1, the current second the newest), of ratio x the requests of
-- the stretch's seconds before the current one but its first, less the
-- hedges committed in them: what the earlier seconds leave to hedge.
local function credit(a, ratio)
  local requests, committed, least = 0, 0, math.huge
  for age = 1, 2 * a.window do
    local slot = at(a, a.now - age)
    if slot ~= nil then
      committed = committed + slot.committed
    end
    if age >= a.window then
      least = math.min(least, ratio * requests - committed)
    end
    if slot ~= nil then
      requests = requests + slot.requests
    end
  end
  return least
end

-- advance moves the account to second `now`, giving every second since the
-- last call an empty slot, and returns the current second's slot. A clock
-- that steps back keeps counting in the latest second.
local function advance(a, now, ratio)
  if now > a.now then
    for s = math.max(a.now + 1, now - a.size + 1), now do
      local slot = a.slots[s % a.size]
      slot.second, slot.requests, slot.committed = s, 0, 0
    end
    a.now = now
    a.stale = true
  end
  if a.stale then
    a.earlier = credit(a, ratio)
    a.stale = false
  end
  return a.slots[a.now % a.size]
end

-- sweep drops, once a second, the accounts that saw no request for two
-- windows.
local function sweep(now)
  if now <= swept then
    return
  end
  swept = now
  for name, a in pairs(accounts) do
    if a.now < now - 2 * a.window then
      accounts[name] = nil
    end
  end
end

function envoy_on_request(request_handle)
  local now = os.time()
  sweep(now)
  local a, terms = account(request_handle)
  if a == nil then
    return
  end
  local headers = request_handle:headers()
  for _, name in ipairs(CLIENT_HEADERS) do
    headers:remove(name)
  end
  local slot = advance(a, now, terms.ratio)
  slot.requests = slot.requests + 1
  local left = a.earlier + terms.ratio * slot.requests - slot.committed
  local fit = math.min(terms.hedges, math.floor(left))
  if fit < 1 then
    headers:add("x-envoy-upstream-rq-per-try-timeout-ms", "0")
    return
  end
  if fit < terms.retries then
    headers:add("x-envoy-max-retries", tostring(fit))
  end
  if left - fit < terms.late_below then
    headers:add("x-envoy-upstream-rq-per-try-timeout-ms", tostring(terms.late_ms))
  end
  slot.committed = slot.committed + fit
  local info = request_handle:streamInfo():dynamicMetadata()
  info:set(FILTER, "committed", fit)
  info:set(FILTER, "second", slot.second)
  info:set(FILTER, "generation", a.generation)
end

function envoy_on_response(response_handle)
  local headers = response_handle:headers()
  local a = account(response_handle)
  if a == nil then
    -- tailcut's routes without an account (bypass, unhedged, hedging off):
    -- the attempt count is for the account, never for clients.
    if response_handle:metadata():get("owned") then
      headers:remove("x-envoy-attempt-count")
    end
    return
  end
  local attempts = tonumber(headers:get("x-envoy-attempt-count") or "1") or 1
  headers:remove("x-envoy-attempt-count")
  local mine = response_handle:streamInfo():dynamicMetadata():get(FILTER)
  if mine == nil or mine.committed == nil or mine.generation ~= a.generation then
    return
  end
  local unused = mine.committed - math.min(mine.committed, attempts - 1)
  local slot = at(a, mine.second)
  if unused > 0 and slot ~= nil then
    slot.committed = slot.committed - unused
    if mine.second ~= a.now then
      a.stale = true
    end
  end
end
