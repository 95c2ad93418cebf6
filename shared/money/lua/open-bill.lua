-- Opens an account's bill (a new account's at 0) or sets whether it is unlimited.
-- KEYS: the account's bill. ARGV: id, unlimited ('1' or '0').
redis.call('HSETNX', KEYS[1], 'id', ARGV[1])
redis.call('HSETNX', KEYS[1], 'balance', '0')
redis.call('HSETNX', KEYS[1], 'reserved', '0')
redis.call('HSETNX', KEYS[1], 'credits', '0')
redis.call('HSETNX', KEYS[1], 'credits_at', '0')
redis.call('HSET', KEYS[1], 'unlimited', ARGV[2])
return 1
