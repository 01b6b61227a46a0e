-- tailcut's hedge account: a rate cap on hedges in Envoy's data path.
--
-- Envoy's retry_budget does not bound hedges: a retry holds its place in the
-- budget only while it waits out its back-off (1 ms on a hedged route), not
-- while it runs. When every replica turns slow, every request passes its
-- delay, and until the operator's next estimate each one would be hedged
-- (#14, scenario 6). This filter keeps one account per policy, named by the
-- hedged route's metadata (account, ratio, window, hedges):
--
-- * The account counts, for each of the last `window` seconds, the requests
--   that arrived and the hedges committed to.
-- * A request may be hedged only while the hedges committed within the
--   window, its own included, stay within `ratio` of the requests that
--   arrived within it. Its hedges (`hedges`, the policy's maxHedges, or fewer
--   when fewer fit) are committed when it arrives, since Envoy sends them
--   later, when the request has run past the delay. A request that fits none
--   goes out with x-envoy-max-retries: 0, and Envoy does not hedge it.
-- * Once what is left in the window falls below `reserve` hedges, a request
--   that still fits is hedged late: after `late_ms`
--   (x-envoy-upstream-rq-per-try-timeout-ms) instead of the delay. When the
--   slow share equals the budget, hedges of fast requests that ran a little
--   past the delay would take the slow requests' places; late, they are not
--   sent, and the slow requests are hedged half a delay later.
-- * When the answer comes, the hedges Envoy did not send
--   (x-envoy-attempt-count, which the filter then removes) are given back to
--   the second they were committed in, if it is still in the window.
--
-- So whenever a request arrives, the hedges committed within the last
-- `window` seconds (whole seconds of os.time(), per Envoy worker), its own
-- included, are at most `ratio` of the requests that arrived in them, however
-- slow the replicas turn. Over any other stretch of `window` seconds, hedges
-- may exceed `ratio` of its requests by what the `window` seconds before it
-- left unused: little in a steady stream, where hedges use the budget as
-- they come. A commitment whose answer never comes leaves with its second.
--
-- Lua state is per worker thread: each worker keeps its own accounts, and
-- each holds the ratio for its own requests.

local FILTER = "tailcut.hedge_budget"
local accounts = {}

local function account(handle)
  local md = handle:metadata()
  local name = md:get("account")
  if name == nil then
    return nil
  end
  local window = md:get("window")
  local a = accounts[name]
  if a == nil or a.window ~= window then
    a = {window = window, now = 0, slots = {}, requests = 0, committed = 0}
    for i = 0, window - 1 do
      a.slots[i] = {second = -1, requests = 0, committed = 0}
    end
    accounts[name] = a
  end
  return a, md
end

-- advance moves the account to second `now`: the seconds that left the
-- window leave the totals, and every second since the last call gets an
-- empty slot (a slot serves the seconds that are `window` apart).
local function advance(a, now)
  if now <= a.now then
    return a.slots[a.now % a.window]
  end
  for s = math.max(a.now + 1, now - a.window + 1), now do
    local slot = a.slots[s % a.window]
    a.requests = a.requests - slot.requests
    a.committed = a.committed - slot.committed
    slot.second, slot.requests, slot.committed = s, 0, 0
  end
  a.now = now
  return a.slots[now % a.window]
end

function envoy_on_request(request_handle)
  local a, md = account(request_handle)
  if a == nil then
    return
  end
  local slot = advance(a, os.time())
  slot.requests = slot.requests + 1
  a.requests = a.requests + 1
  local hedges = md:get("hedges")
  local left = md:get("ratio") * a.requests - a.committed
  local onTime = left - md:get("reserve")
  local fit = math.min(hedges, math.floor(onTime >= 1 and onTime or left))
  if fit < 1 then
    request_handle:headers():replace("x-envoy-max-retries", "0")
    return
  end
  if fit < hedges then
    request_handle:headers():replace("x-envoy-max-retries", tostring(fit))
  end
  if onTime < 1 then
    request_handle:headers():replace("x-envoy-upstream-rq-per-try-timeout-ms", tostring(md:get("late_ms")))
  end
  slot.committed = slot.committed + fit
  a.committed = a.committed + fit
  local info = request_handle:streamInfo():dynamicMetadata()
  info:set(FILTER, "committed", fit)
  info:set(FILTER, "second", slot.second)
end

function envoy_on_response(response_handle)
  local a = account(response_handle)
  if a == nil then
    return
  end
  local headers = response_handle:headers()
  local attempts = tonumber(headers:get("x-envoy-attempt-count") or "1") or 1
  headers:remove("x-envoy-attempt-count")
  local mine = response_handle:streamInfo():dynamicMetadata():get(FILTER)
  if mine == nil or mine.committed == nil then
    return
  end
  local unused = mine.committed - math.min(mine.committed, attempts - 1)
  local slot = a.slots[mine.second % a.window]
  if unused > 0 and slot.second == mine.second then
    slot.committed = slot.committed - unused
    a.committed = a.committed - unused
  end
end
