-- A request's whole admission, one script (steps 4 and 5 of the scheduler): its reservation (reserve-rules.lua),
-- then its place (place-rules.lua), then its BullMQ add (bullmq-add.lua), all or nothing: a refused reservation
-- places and adds nothing. Only where one script may reach the account's keys and the queue's (not a Redis Cluster).
-- KEYS: 1-9 as fair.lua, 10 the queue's prioritized set, 11 the account's bill, 12 its bucket's reservation deadlines,
--   13 the request's settled marker, 14 the job's hash, 15 the queue's marker, 16 its meta, 17 its events stream,
--   18 its priority counter, 19 its active list.
-- ARGV: 1 '1' when the request reserves (else nothing is reserved), 2-13 reserve-rules.lua's A, 14-24 place-rules.lua's A,
--   25 '1' when a place behind others is marked in the job's data (`contended`: a priority request's), 26 the job's
--   name, 27 its data (a JSON object), 28 its options (JSON, as BullMQ stores them), 29 its timestamp (ms).
-- Returns {verdict (reserve-rules.lua's; {0,…} when nothing was reserved), priority, jobs of its band before it, added}.
local verdict = {0, 0, 0, 0, 0, 0, 0, 0, 0}
if ARGV[1] == '1' then
  verdict = reserve({KEYS[11], KEYS[12], nil, KEYS[13]}, {unpack(ARGV, 2, 13)})
  if verdict[1] ~= 0 then return {verdict, 0, 0, 0} end
end
local placed = place({unpack(ARGV, 14, 24)})
local data = ARGV[27]
if ARGV[25] == '1' and placed[2] > 0 then
  -- Its first member, before the others (the object is never empty: it names at least the endpoint).
  data = '{"contended":true,' .. string.sub(data, 2)
end
local added = add_prioritized(
  {job = KEYS[14], marker = KEYS[15], meta = KEYS[16], events = KEYS[17], pc = KEYS[18], active = KEYS[19], prioritized = KEYS[10]},
  ARGV[14], ARGV[26], data, ARGV[28], ARGV[29], placed[1])
return {verdict, placed[1], placed[2], added}
