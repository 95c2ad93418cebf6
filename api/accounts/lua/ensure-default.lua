-- Makes the default account's directory entry where it is missing (default-account.lua before it).
-- KEYS: the default account, the accounts index. ARGV: the default account's id, now (unix s).
-- Returns 1.
ensureDefault(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
return 1
