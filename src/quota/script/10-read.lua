-- The key, read once. A small hash comes whole from HSCAN's first call
-- (cursor 0 says it is whole: a compact hash always is, a larger one past
-- about SCAN fields is not), and stands for HMGET, HLEN and the fair tails'
-- HGETALL: `all` holds each field once (one scan call over a hash nobody
-- writes meanwhile), `at` its value, `n` their count, and the writes of
-- this call are applied to them as they are made (`put`). A larger one is
-- read by name (HMGET) and counted (HLEN); `all` stays nil. Either way the
-- same fields are read: `got` = left, quota, demand, the host's record,
-- the fair tails' cache, back (false where absent).
local SCAN = 16

local function read_key(key, host)
  local k = {all = nil, at = {}, n = 0}
  local scan = redis.call('HSCAN', key, 0, 'COUNT', SCAN)
  if scan[1] == '0' then
    k.all = scan[2]
    k.n = #k.all / 2
    for i = 1, #k.all, 2 do k.at[k.all[i]] = k.all[i + 1] end
    local at = k.at
    k.got = {at.left or false, at.quota or false, at.demand or false, at[host] or false,
      at.fair or false, at.back or false}
  else
    k.got = redis.call('HMGET', key, 'left', 'quota', 'demand', host, 'fair', 'back')
  end
  return k
end

-- A write of this call, applied to the key as read (when read whole).
local function put(k, field, value)
  if not k.all then return end
  if k.at[field] == nil then
    k.n = k.n + 1
    k.all[#k.all + 1] = field
    k.all[#k.all + 1] = value
  else
    for i = 1, #k.all, 2 do if k.all[i] == field then k.all[i + 1] = value end end
  end
  k.at[field] = value
end

-- The key's fields, as HLEN would count them after this call's writes
-- (`back_written`: this call wrote `back`).
local function field_count(k, key, back_written)
  if k.all then return k.n end
  local n = redis.call('HLEN', key)
  if back_written and k.got[6] == false then n = n + 1 end
  return n
end

-- Every field and value of the key (the fair tails' pass over the records).
local function all_fields(k, key)
  return k.all or redis.call('HGETALL', key)
end
