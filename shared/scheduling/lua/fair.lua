-- Shared by the scheduler's scripts (sent before each): the two bands' keys and a member's encoding.
--
-- Every script takes the same nine keys, all under the queue's hash tag (one Cluster slot, with BullMQ's keys):
--   KEYS[1], KEYS[2]  the finish tags (hash: account -> tag) of the interactive and the flex band
--   KEYS[3], KEYS[4]  the virtual time of each band (string)
--   KEYS[5], KEYS[6]  the jobs of each band waiting or on their way to the queue (string)
--   KEYS[7]           the backlog: jobs waiting by tier and account (hash: backlog field -> count)
--   KEYS[8]           the members: every job counted, by id (hash: job id -> member)
--   KEYS[9]           the weights of the accounts that wait (hash: account -> weight)
-- A tagged job's slot in its band is its start tag plus this room, less its lead: a priority request may start up to
-- this far ahead of the band's virtual time (a job untagged, where nothing waited, goes to the band's head, slot 0).
local maxPriorityLead = 65536

local function bandKeys(tier)
  -- A batch's requests wait in the flex band (counted apart: `batch|account`).
  if tier == 'flex' or tier == 'batch' then return KEYS[2], KEYS[4], KEYS[6] end
  return KEYS[1], KEYS[3], KEYS[5]
end

-- The encodings, version 1 (what a release reads it must keep reading: jobs counted by the one before wait on).
-- A backlog field: 'tier|account' (read by fair-queue.ts `backlogField` too). An account id may hold '|': the tier
-- is the part before the first one.
local function backlog_field(tier, account)
  return tier .. '|' .. account
end

-- A member: 'tier|account|cost|placed ms', cost in tag units as the api wrote it.
local function encode_member(tier, account, cost, placed)
  return tier .. '|' .. account .. '|' .. cost .. '|' .. placed
end

local function member(encoded)
  local tier, account, cost, placed = string.match(encoded, '^([^|]*)|(.*)|([^|]*)|([^|]*)$')
  return tier, account, tonumber(cost) or 0, tonumber(placed) or 0
end

-- A counted job leaves the backlog (taken, removed, or found gone): exactly once, by its membership.
-- Returns its tier, account and cost, or nil when it was not counted (any more).
local function leave(jobId)
  local encoded = redis.call('HGET', KEYS[8], jobId)
  if not encoded then return nil end
  redis.call('HDEL', KEYS[8], jobId)
  local tier, account, cost = member(encoded)
  local field = backlog_field(tier, account)
  if redis.call('HINCRBY', KEYS[7], field, -1) <= 0 then redis.call('HDEL', KEYS[7], field) end
  local _, _, count = bandKeys(tier)
  if redis.call('DECR', count) <= 0 then redis.call('DEL', count) end
  return tier, account, cost
end

-- Gives an account back the cost of a job that never ran: its next job starts that much earlier.
local function refund(tier, account, cost)
  local tags = bandKeys(tier)
  local left = tonumber(redis.call('HINCRBYFLOAT', tags, account, -cost))
  if left <= 0 then redis.call('HDEL', tags, account) end
end
