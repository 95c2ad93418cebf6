-- Admission: checks the key's rate limits, its limit and the account's balance, and reserves the worst case
-- (reserve-rules.lua, sent before this).
-- KEYS: the account's bill, its bucket's reservation deadlines, the job's queue key, the request's settled marker
-- ARGV: as reserve-rules.lua's A; ARGV[10] '1' when the job is being added right behind this call (a refusal then
--       blocks its id with a placeholder)
-- Returns reserve-rules.lua's verdict.
local verdict = reserve(KEYS, ARGV)
-- Refused with a job key given: a placeholder under that key keeps the job (sent right behind this call) out of the queue.
if verdict[1] ~= 0 and ARGV[10] == '1' then
  redis.call('HSET', KEYS[3], 'refused', verdict[1])
  redis.call('PEXPIRE', KEYS[3], 60000)
end
return verdict
