-- Claims the lead of a request for a job, unless an identical request's job holds it: then names that job.
-- KEYS: the request's lead mark
-- ARGV: the claiming job's holder value (`jobId form keyId`), ms the mark lasts (the job's deadline)
-- Returns '' when the job claimed the lead, else the value of the job that holds it.
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
