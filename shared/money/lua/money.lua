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

-- The rules every request is admitted by, on its account's bill as read by
-- HMGET 'balance', 'reserved', 'unlimited', '<key>.spent', '<key>.reserved', '<key>.rpm', '<key>.tpm':
-- the key's rates (a nil limit is none), then the key's limit ('' none) and the account's balance with `micros`
-- more held against them. Returns the verdict {code, rpm limit, rpm remaining, rpm reset ms, tpm limit,
-- tpm remaining, tpm reset ms, retry after ms} (code 0 admitted, 1 rpm, 2 tpm, 3 the key's limit, 4 the balance)
-- and, when admitted, the two rates' new arrival times.
local function admit(bill, micros, tokens, now, key_limit, rpm_limit, tpm_limit)
  local rpm_ok, rl, rr, rs, rretry, rpm_tat = gcra_take(bill[6], rpm_limit, 1, now)
  local tpm_ok, tl, tr, ts, tretry, tpm_tat = gcra_take(bill[7], tpm_limit, tokens, now)
  if not rpm_ok then return {1, rl, rr, rs, tl, tr, ts, rretry} end
  if not tpm_ok then return {2, rl, rr, rs, tl, tr, ts, tretry} end
  if key_limit ~= '' and tonumber(bill[4]) + tonumber(bill[5] or '0') + micros > tonumber(key_limit) then
    return {3, rl, rr, rs, tl, tr, ts, 0}
  end
  if bill[3] ~= '1' and tonumber(bill[1]) - tonumber(bill[2] or '0') - micros < 0 then return {4, rl, rr, rs, tl, tr, ts, 0} end
  return {0, rl, rr, rs, tl, tr, ts, 0}, rpm_tat, tpm_tat
end

-- A reservation is the field 'r:<request id>' of its account's bill, holding
-- '<key id> <micros> <tokens> <tpm limit, empty for none>': what settlement gives back and to whom.
local function reservation_field(request_id) return 'r:' .. request_id end

local function encode_reservation(key_id, micros, tokens, tpm)
  return key_id .. ' ' .. int(micros) .. ' ' .. int(tokens) .. ' ' .. tpm
end

-- Key id, micros, tokens, tpm limit ('' for none); nil for a value that is not a reservation.
local function decode_reservation(text)
  local key_id, micros, tokens, tpm = string.match(text, '^(%S+) (%d+) (%d+) ?(%S*)$')
  if not key_id then return nil end
  return key_id, tonumber(micros), tonumber(tokens), tpm
end
