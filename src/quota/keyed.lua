-- Global rates of a keyed task's keys: grants one host chunks of many keys'
-- slices in one call. See `KEYED` in keyed.rs for the keys, the arguments
-- and the reply.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slice_ms = tonumber(ARGV[1])
local current = math.floor(now / slice_ms)
-- The census: who pulled keys lately, for the fallback's share.
local window = math.max(3 * slice_ms, 60000)
redis.call('ZADD', KEYS[2], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('PEXPIRE', KEYS[2], window)
-- The version of the keys' record (0: none, or one no host would read).
local record = tonumber(redis.call('HGET', KEYS[3], 'version')) or 0
if record ~= math.floor(record) or record < 1 or record > 9007199254740991 then record = 0 end
local out = {now, current, redis.call('ZCARD', KEYS[2]), 0, record}
if tonumber(ARGV[2]) ~= current then return out end
out[4] = 1
-- A store that lost the keys' counts (a restart, a failover to a replica
-- that missed them) cannot tell what the current slice gave: it grants
-- nothing of it, only of the next. `:born-ms` marks the instant it found
-- none at: the slice of every slicing that holds it is granted nothing.
-- (An older script keeps its own mark, a slice of its slicing, in `:born`.)
local born_ms = tonumber(redis.call('GET', KEYS[1] .. ':born-ms'))
if not born_ms or born_ms ~= math.floor(born_ms) or born_ms < 0 or born_ms > now then
  born_ms = now
  redis.call('SET', KEYS[1] .. ':born-ms', born_ms)
end
local born = math.floor(born_ms / slice_ms)
-- A key's field in a slice's hash: given + asks × 2^32 (what the slice gave
-- of it, its own hosts' charges included, and how many asks it had).
local ASK = 4294967296
local function read(hash, id)
  local v = tonumber(redis.call('HGET', hash, id) or '0')
  -- Anything but a whole number in range reads as a spent slice asked once.
  if not v or v ~= math.floor(v) or v < 0 or v >= 2 ^ 53 then return nil, 1 end
  return v % ASK, math.floor(v / ASK)
end
local here = KEYS[1] .. ':' .. current
local expiring = {}
-- The fleet's spread keys: a key asked in a slice at least SPREAD times
-- per permit (by about as many hosts as it has permits, each asking for
-- this slice and ahead for the next: no chunk of one permit reaches each,
-- and their allowances alone would pass its limit), and refused in
-- it (its slice spent), is scored by its asks in the slice's set
-- `KEYS[1]:h:<slice>`, kept to its LISTED most asked (a set of at most
-- twice that between trims, kept to the end of the next slice). Each
-- answer lists this slice's and the last's, so every host that calls
-- learns them before the next slice's first request and gives them no
-- allowance there. A key asked less keeps its allowances: listed, its
-- chunks would go to hosts that never see it again (figures in
-- docs/design/keyed-global.md).
local SPREAD, LISTED = 2, 32
local listed = {}
local asks = tonumber(ARGV[4])
for i = 5, 4 + 5 * asks, 5 do
  local id = ARGV[i]
  local permits, want, charge = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local slice = current + tonumber(ARGV[i + 4])
  local counts = KEYS[1] .. ':' .. slice
  local given = read(counts, id)
  if not given then
    -- Damaged: spent, asked once, and written so (HINCRBY below would fail).
    given = permits
    redis.call('HSET', counts, id, permits + ASK)
  end
  local used = given + charge
  -- A key asked for by many hosts is divided among them: each ask gets at
  -- most the slice over the asks of the current slice (so a key spread
  -- over a thousand hosts is not given whole to the first few, stranded).
  local _, askers = read(here, id)
  local share = permits
  if askers > 1 then share = math.max(1, math.floor(permits / askers)) end
  local grant = math.max(0, math.min(want, share, permits - used))
  if slice == born then grant = 0 end
  local asked = math.floor(redis.call('HINCRBY', counts, id, charge + grant + ASK) / ASK)
  expiring[counts] = (slice + 1) * slice_ms
  -- (Only an id of 16 hex digits is listed: every host reads the list.)
  if slice == current and asked >= SPREAD * permits and grant < want and permits - used - grant <= 0
      and #id == 16 and not id:find('%X') then
    local set = KEYS[1] .. ':h:' .. slice
    redis.call('ZADD', set, asked, id)
    listed[set] = true
    expiring[set] = (slice + 2) * slice_ms
  end
  out[#out + 1] = grant
  out[#out + 1] = math.max(0, permits - used - grant)
end
-- The names the host sent of its most asked keys (the fleet's hot keys,
-- for operators), kept with the counts of the slice each ask is for.
for i = 5 + 5 * asks, #ARGV - 2, 3 do
  local s = current + (tonumber(ARGV[i + 1]) == 1 and 1 or 0)
  local names = KEYS[1] .. ':n:' .. s
  redis.call('HSET', names, ARGV[i], string.sub(ARGV[i + 2], 1, 64))
  expiring[names] = (s + 1) * slice_ms
end
for key, at in pairs(expiring) do redis.call('PEXPIREAT', key, at) end
for set in pairs(listed) do
  local n = redis.call('ZCARD', set)
  if n > 2 * LISTED then redis.call('ZREMRANGEBYRANK', set, 0, n - LISTED - 1) end
end
-- The spread keys of this slice, then of the last (a key listed there is
-- learnt by a host whose call this slice came before the key's refusal),
-- each once and at most LISTED, each id (16 hex digits) as two 32-bit
-- halves: the answer is integers.
local told, n = {}, 0
for back = 0, 1 do
  for _, id in ipairs(redis.call('ZREVRANGE', KEYS[1] .. ':h:' .. (current - back), 0, LISTED - 1)) do
    if n < LISTED and not told[id] then
      told[id], n = true, n + 1
      out[#out + 1] = tonumber(string.sub(id, 1, 8), 16) or 0
      out[#out + 1] = tonumber(string.sub(id, 9, 16), 16) or 0
    end
  end
end
return out
