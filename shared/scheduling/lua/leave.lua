-- A job left its queue's backlog: taken by a worker, or removed before it ran (then its account gets its cost
-- back). Idempotent: only a counted job is uncounted, once.
-- KEYS: as fair.lua.
-- ARGV: job id, the job's hash key when a worker took it ('': removed), band starts (interactive, flex), band width.
-- A job taken moves its band's virtual time to its tag, read from the job (a shift since its take moved it there).
local tier, account, cost = leave(ARGV[1])
if not tier then return 0 end
if ARGV[2] == '' then
  refund(tier, account, cost)
  return 1
end
local first = tonumber((tier == 'flex' or tier == 'batch') and ARGV[4] or ARGV[3])
local width = tonumber(ARGV[5])
local priority = tonumber(redis.call('HGET', ARGV[2], 'priority') or '0')
if priority < first or priority >= first + width then return 1 end
local _, clock = bandKeys(tier)
local tag = priority - first - maxPriorityLead
if tag > tonumber(redis.call('GET', clock) or '0') then redis.call('SET', clock, tag) end
return 1
