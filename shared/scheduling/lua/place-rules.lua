-- The placement, as a function (place.lua runs it alone; api/requests/lua/admit.lua with the reservation and
-- the add). Counts a job in its queue's backlog and gives it its place: its BullMQ priority.
-- KEYS: as fair.lua; then KEYS[10] the queue's prioritized set.
-- A (the arguments): job id, tier, account, weight, cost (tag units, already divided by the weight), lead (tag units a priority
-- job starts ahead of its account's place; 0 for others), tagged ('1': the band may be contended, so the job gets
-- its fair tag; '0': it goes to its band's head, the tags untouched), band start, band width, the queue's key prefix
-- (`bull:{chat}:`), now (ms).
-- Returns the job's priority and how many jobs of its band were waiting or on their way before it (what a priority
-- request's lead was worth).
-- A band's shift rewrites BullMQ's own state: a prioritized job's score is its priority times 2^32 plus BullMQ's
-- counter, its hash's `priority` field, and the jobs taken are the list `<queue prefix>active`.
-- Checked against BullMQ 6.7.0 (test/integration/bullmq-place-internals.test.ts pins it to the lockfile's).
local function place(A)
  local jobId, tier, account = A[1], A[2], A[3]
  local cost, lead = tonumber(A[5]), tonumber(A[6])
  local first, width = tonumber(A[8]), tonumber(A[9])
  local tags, clock, count = bandKeys(tier)
  local two32 = 4294967296

  local before = tonumber(redis.call('GET', count) or '0')
  -- Counted once: a job placed again (a retried add) is not counted twice.
  if redis.call('HSETNX', KEYS[8], jobId, encode_member(tier, account, A[5], A[11])) == 1 then
    if redis.call('INCR', count) == 1 then
      -- Nothing of this band waited or was on its way: every account starts level.
      redis.call('DEL', tags, clock)
    end
    redis.call('HINCRBY', KEYS[7], backlog_field(tier, account), 1)
    redis.call('HSET', KEYS[9], account, A[4])
  end
  if A[7] ~= '1' then return { first, before } end

  local virtual = tonumber(redis.call('GET', clock) or '0')
  if virtual >= width / 4 then
    -- Shift the band down by its virtual time: every waiting job of the band (score and priority), every job taken
    -- but not yet reported (its worker reads its tag from it), and every tag. O(backlog), once per quarter width.
    local function shifted(priority) return math.max(first, priority - virtual) end
    local members = redis.call('ZRANGEBYSCORE', KEYS[10], string.format('%.0f', first * two32), '(' .. string.format('%.0f', (first + width) * two32), 'WITHSCORES')
    for i = 1, #members, 2 do
      local score = tonumber(members[i + 1])
      local priority = math.floor(score / two32)
      local moved = shifted(priority)
      redis.call('ZADD', KEYS[10], string.format('%.0f', moved * two32 + (score - priority * two32)), members[i])
      redis.call('HSET', A[10] .. members[i], 'priority', moved)
    end
    local active = redis.call('LRANGE', A[10] .. 'active', 0, -1)
    for i = 1, #active do
      local priority = tonumber(redis.call('HGET', A[10] .. active[i], 'priority') or '0')
      if priority >= first and priority < first + width then redis.call('HSET', A[10] .. active[i], 'priority', shifted(priority)) end
    end
    local all = redis.call('HGETALL', tags)
    for i = 1, #all, 2 do
      local tag = tonumber(all[i + 1]) - virtual
      if tag <= 0 then redis.call('HDEL', tags, all[i]) else redis.call('HSET', tags, all[i], tag) end
    end
    virtual = 0
    redis.call('DEL', clock)
  end

  -- Start-time fair queueing: the job starts at S = max(V, F) and moves its account's finish tag F to S + cost.
  local finish = tonumber(redis.call('HGET', tags, account) or '0')
  local start = math.max(virtual, finish)
  redis.call('HSET', tags, account, start + cost)
  redis.call('PEXPIRE', tags, 86400000)
  -- A priority job starts `lead` ahead of its place: its account still pays the cost.
  local slot = math.floor(maxPriorityLead + start - math.min(lead, maxPriorityLead))
  if slot > width - 1 then slot = width - 1 end
  return { first + slot, before }
end
