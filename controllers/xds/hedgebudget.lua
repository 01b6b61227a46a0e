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
-- * A request may be hedged only if the account can pay for all its hedges
--   (`hedges`, the route's num_retries) up front; they are reserved, and the
--   ones Envoy did not send (x-envoy-attempt-count on the response) are paid
--   back. A request the account cannot pay for goes out with
--   x-envoy-max-retries: 0, so Envoy does not hedge it.
-- * The account holds at most what the last two seconds deposited, and at
--   least `burst`: enough to pay for the requests in flight that may need a
--   hedge, small enough to stay inside the budget over any 30 s window.
--
-- So over any stretch of N requests, hedges <= ratio * N + what the account
-- held at its start. Reserving up front makes that strict: hedges in flight
-- were paid for. Lua state is per worker thread: each worker keeps its own
-- accounts. A request whose response never comes (the client went away) keeps
-- its reservation: the account errs toward fewer hedges.

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
  local hedges = md:get("hedges")
  if a.balance >= hedges then
    a.balance = a.balance - hedges
    request_handle:streamInfo():dynamicMetadata():set("tailcut.hedge_budget", "reserved", hedges)
  else
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
  local meta = response_handle:streamInfo():dynamicMetadata():get("tailcut.hedge_budget")
  local reserved = meta and meta["reserved"] or 0
  a.balance = a.balance + reserved - (attempts - 1)
end
