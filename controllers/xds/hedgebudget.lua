-- tailcut's hedge account: a rate cap on hedges in Envoy's data path.
--
-- Envoy's retry_budget does not bound hedges: a retry holds its place in the
-- budget only while it waits out its back-off (1 ms on a hedged route), not
-- while it runs. When every replica turns slow, every request passes its
-- delay, and until the operator's next estimate each one would be hedged
-- (#14, scenario 6). This filter keeps one account per policy, named by the
-- hedged route's metadata:
--
-- * Each request on the hedged route deposits `ratio` hedges.
-- * A request that arrives while the account holds less than one hedge goes
--   out with x-envoy-max-retries: 0, so Envoy does not hedge it.
-- * Each extra attempt Envoy made for a request (x-envoy-attempt-count - 1 on
--   the answer) withdraws one.
-- * The account holds at most what the last two seconds deposited, and at
--   least `burst`.
--
-- Over any stretch of N requests, hedges <= ratio * N + what the account held
-- at its start + the hedges of requests that were in flight at its start
-- (their withdrawals come with their answers). Paying up front instead would
-- make the bound strict, but then only as many requests as the account holds
-- could be hedged at once, and ordinary hedging starved: in the local stack's
-- e2e the hedged p99 stayed at the unhedged 116 ms. Lua state is per worker
-- thread: each worker keeps its own accounts.

local accounts = {}

local function account(handle)
  local md = handle:metadata()
  local name = md:get("account")
  if name == nil then
    return nil
  end
  local a = accounts[name]
  if a == nil then
    a = {balance = md:get("burst"), second = os.time(), this = 0, last = 0}
    accounts[name] = a
  end
  return a, md
end

function envoy_on_request(request_handle)
  local a, md = account(request_handle)
  if a == nil then
    return
  end
  local now = os.time()
  if now ~= a.second then
    a.last = (now == a.second + 1) and a.this or 0
    a.this, a.second = 0, now
  end
  a.this = a.this + 1
  local ratio = md:get("ratio")
  local cap = math.max(md:get("burst"), ratio * (a.last + a.this))
  a.balance = math.min(cap, a.balance + ratio)
  if a.balance < 1 then
    request_handle:headers():replace("x-envoy-max-retries", "0")
  end
end

function envoy_on_response(response_handle)
  local a = account(response_handle)
  if a == nil then
    return
  end
  local headers = response_handle:headers()
  local attempts = tonumber(headers:get("x-envoy-attempt-count") or "1") or 1
  headers:remove("x-envoy-attempt-count")
  if attempts > 1 then
    a.balance = a.balance - (attempts - 1)
  end
end
