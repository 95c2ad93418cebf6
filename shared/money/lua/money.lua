-- The pieces of arithmetic and encoding the money scripts share: read once and put before each of them
-- (shared/money/scripts.ts), so a rule is written here only.

-- Lua's own number formatting turns large integers into `1e+14`: money is written with `%d`.
local function int(x) return string.format('%d', x) end

-- Rate limits are GCRA over a minute: a minute's worth may come at once, then at the limit's pace.
local window_ms = 60000

-- Takes `cost` from a limit whose theoretical arrival time is `tat_text` (nil: never used).
-- Returns allowed, limit, remaining, ms until the window is whole, retry after ms, the new arrival time;
-- with no limit: allowed and zeros.
local function gcra_take(tat_text, limit, cost, now)
  if not limit then return true, 0, 0, 0, 0, 0 end
  local interval = window_ms / limit
  if cost > limit then cost = limit end
  local tat = tonumber(tat_text or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  if new_tat - now > window_ms then
    return false, limit, math.max(0, math.floor((window_ms - (tat - now)) / interval)), math.ceil(tat - now), math.ceil(new_tat - window_ms - now), tat
  end
  return true, limit, math.floor((window_ms - (new_tat - now)) / interval), math.ceil(new_tat - now), 0, new_tat
end

-- Gives back `unused` of what a take counted (an estimate larger than the use), never to before now.
local function gcra_give_back(tat, unused, limit, now)
  local new_tat = tat - unused * (window_ms / limit)
  if new_tat < now then new_tat = now end
  return new_tat
end

-- Budgets per period (shared/money/budgets.ts): the api sends those in force as '<counter>=<micros>,…' ('' none),
-- each counter naming its budget and its period's start. A counter's fields in the bill are '<counter>.spent',
-- '<counter>.reserved' and '<counter>.alerted'; the budget's own name ('b:t', 'b:k:<key>', 'b:m:<member>', the counter
-- less its ':<period>') holds which counter is its current one, so a past period's is found without a scan.
local function parse_budgets(text)
  local list = {}
  for counter, limit in string.gmatch(text or '', '([^,=]+)=(%d+)') do list[#list + 1] = {counter, tonumber(limit)} end
  return list
end

local function budget_of(counter) return string.match(counter, '^(.*):%a%d+$') end

-- The first budget that `micros` more would take past its limit (its place in the list), or 0.
local function over_budget(bill_key, budgets, micros)
  for i, b in ipairs(budgets) do
    local c = redis.call('HMGET', bill_key, b[1] .. '.spent', b[1] .. '.reserved')
    if tonumber(c[1] or '0') + tonumber(c[2] or '0') + micros > b[2] then return i end
  end
  return 0
end

-- Holds `micros` (and counts `spent`) on each budget's counter. A budget's first use in a new period makes that
-- period's counter its current one and deletes the one before when nothing is held in it any more (else the
-- settlement or release that brings its holds to 0 deletes it): past periods do not pile up in the bill.
local function hold_budgets(bill_key, budgets, micros, spent)
  for _, b in ipairs(budgets) do
    local name = budget_of(b[1])
    local current = redis.call('HGET', bill_key, name)
    if current ~= b[1] then
      if current and tonumber(redis.call('HGET', bill_key, current .. '.reserved') or '0') == 0 then
        redis.call('HDEL', bill_key, current .. '.spent', current .. '.reserved', current .. '.alerted')
      end
      redis.call('HSET', bill_key, name, b[1])
    end
    -- Both fields exist from the counter's first use: settlement counts on a counter it finds, never makes one up.
    redis.call('HINCRBY', bill_key, b[1] .. '.reserved', int(micros))
    redis.call('HINCRBY', bill_key, b[1] .. '.spent', int(spent))
  end
end

-- The thresholds (percent, ascending) `after` reaches of `limit` that `alerted` (the highest sent) had not:
-- the highest is kept as sent. Each crossing is '<mark>|<percent>|<limit>|<spent>'.
local function crossings(bill_key, mark, limit, after, thresholds, out)
  if not limit or limit <= 0 or #thresholds == 0 then return end
  local alerted = tonumber(redis.call('HGET', bill_key, mark .. '.alerted') or '0')
  local highest = alerted
  for _, pct in ipairs(thresholds) do
    if pct > alerted and after * 100 >= limit * pct then
      out[#out + 1] = mark .. '|' .. pct .. '|' .. int(limit) .. '|' .. int(after)
      highest = pct
    end
  end
  if highest > alerted then redis.call('HSET', bill_key, mark .. '.alerted', highest) end
end

-- The crossings a script decided, written to its bucket's alerts stream in the same step as the marks in the bill:
-- a crossing marked sent is recorded, whatever becomes of the caller that asked for the settlement.
local function append_alerts(stream, account, crossed)
  for _, crossing in ipairs(crossed) do redis.call('XADD', stream, '*', 'account', account, 'crossing', crossing) end
end

local function parse_thresholds(text)
  local list = {}
  for pct in string.gmatch(text or '', '(%d+)') do list[#list + 1] = tonumber(pct) end
  table.sort(list)
  return list
end

-- Settles (or, with `actual` 0 and `settling` false, releases) a reservation's hold of `micros` on its budgets
-- (the reservation's own list: the counters of the period it was admitted in): the holds go, the cost counts, and
-- a past period's counter left with nothing held is deleted. Crossed alert thresholds are appended to `out`.
local function move_budgets(bill_key, text, micros, actual, thresholds, out)
  for _, b in ipairs(parse_budgets(text)) do
    local c = redis.call('HMGET', bill_key, b[1] .. '.spent', b[1] .. '.reserved', budget_of(b[1]))
    -- A counter deleted meanwhile (Redis lost and loaded again) is counted again from the record, not made up here.
    if c[1] then
      local spent = tonumber(c[1]) + actual
      local held = tonumber(c[2] or '0') - micros
      if held < 0 then held = 0 end
      if held == 0 and c[3] ~= b[1] then
        redis.call('HDEL', bill_key, b[1] .. '.spent', b[1] .. '.reserved', b[1] .. '.alerted')
      else
        redis.call('HSET', bill_key, b[1] .. '.spent', int(spent), b[1] .. '.reserved', int(held))
        if actual > 0 and out then crossings(bill_key, b[1], b[2], spent, thresholds, out) end
      end
    end
  end
end

-- The rules every request is admitted by, on its account's bill as read by
-- HMGET 'balance', 'reserved', 'unlimited', '<key>.spent', '<key>.reserved', '<key>.rpm', '<key>.tpm':
-- the key's rates (a nil limit is none), then the key's limit ('' none) and the account's balance with `micros`
-- more held against them. Returns the verdict {code, rpm limit, rpm remaining, rpm reset ms, tpm limit,
-- tpm remaining, tpm reset ms, retry after ms, the refusing budget's place in `budgets`} (code 0 admitted, 1 rpm,
-- 2 tpm, 3 the key's limit, 4 the balance, 6 a budget) and, when admitted, the two rates' new arrival times.
-- The budgets (parse_budgets) are checked after the key's limit and before the balance, on the bill `bill_key`.
local function admit(bill, micros, tokens, now, key_limit, rpm_limit, tpm_limit, bill_key, budgets)
  local rpm_ok, rl, rr, rs, rretry, rpm_tat = gcra_take(bill[6], rpm_limit, 1, now)
  local tpm_ok, tl, tr, ts, tretry, tpm_tat = gcra_take(bill[7], tpm_limit, tokens, now)
  if not rpm_ok then return {1, rl, rr, rs, tl, tr, ts, rretry, 0} end
  if not tpm_ok then return {2, rl, rr, rs, tl, tr, ts, tretry, 0} end
  if key_limit ~= '' and tonumber(bill[4]) + tonumber(bill[5] or '0') + micros > tonumber(key_limit) then
    return {3, rl, rr, rs, tl, tr, ts, 0, 0}
  end
  local over = over_budget(bill_key, budgets, micros)
  if over > 0 then return {6, rl, rr, rs, tl, tr, ts, 0, over} end
  if bill[3] ~= '1' and tonumber(bill[1]) - tonumber(bill[2] or '0') - micros < 0 then return {4, rl, rr, rs, tl, tr, ts, 0, 0} end
  return {0, rl, rr, rs, tl, tr, ts, 0, 0}, rpm_tat, tpm_tat
end

-- A reservation is the field 'r:<request id>' of its account's bill, holding
-- '<key id> <micros> <tokens> <tpm limit, empty for none> <budgets held, as admission took them> <the key's limit>':
-- what settlement gives back and to whom, and the limits its alerts are measured against (a reservation made before
-- budgets has no fifth and sixth part).
local function reservation_field(request_id) return 'r:' .. request_id end

local function encode_reservation(key_id, micros, tokens, tpm, budgets, key_limit)
  return key_id .. ' ' .. int(micros) .. ' ' .. int(tokens) .. ' ' .. tpm .. ' ' .. (budgets or '') .. ' ' .. (key_limit or '')
end

-- Key id, micros, tokens, tpm limit ('' for none), budgets held ('' for none), the key's limit (nil for none);
-- nil for a value that is not a reservation.
local function decode_reservation(text)
  local key_id, micros, tokens, tpm, budgets, key_limit = string.match(text, '^(%S+) (%d+) (%d+) ?(%S*) ?(%S*) ?(%d*)$')
  if not key_id then return nil end
  return key_id, tonumber(micros), tonumber(tokens), tpm, budgets, tonumber(key_limit)
end
