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
