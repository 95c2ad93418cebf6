-- Counts a job in its queue's backlog and gives it its place (place-rules.lua, sent before this).
-- KEYS, ARGV: as place-rules.lua's keys and A.
return place(ARGV)
