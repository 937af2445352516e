-- Global rates of a keyed task's keys: grants one host chunks of many keys'
-- slices in one call. See `KEYED` in keyed.rs for the keys, the arguments
-- and the reply.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slice_ms = tonumber(ARGV[1])
local asked = tonumber(ARGV[2])
local current = math.floor(now / slice_ms)
-- The census: who pulled keys lately, for the fallback's share.
local window = math.max(3 * slice_ms, 60000)
redis.call('ZADD', KEYS[2], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('PEXPIRE', KEYS[2], window)
local out = {now, current, redis.call('ZCARD', KEYS[2]), 0}
if asked ~= current and asked ~= current + 1 then return out end
out[4] = 1
local counts = KEYS[1] .. ':' .. asked
local wrote = false
for i = 4, #ARGV - 3, 4 do
  local permits, want, charge = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  -- A count anyone wrote that is no whole number reads as a spent slice.
  local given = tonumber(redis.call('HGET', counts, ARGV[i]) or '0') or permits
  if given ~= math.floor(given) or given < 0 then given = permits end
  local used = given + charge
  local grant = math.max(0, math.min(want, permits - used))
  if charge + grant > 0 then
    redis.call('HINCRBY', counts, ARGV[i], charge + grant)
    wrote = true
  end
  out[#out + 1] = grant
  out[#out + 1] = math.max(0, permits - used - grant)
end
if wrote then redis.call('PEXPIREAT', counts, (asked + 2) * slice_ms) end
return out
