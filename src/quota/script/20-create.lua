-- A key no host has pulled from: created here at the host's threshold, or
-- written ahead by a manager (`left` and `quota` only, its TTL set). The
-- hosts that asked in the slice before, with their demand, are carried in:
-- present from the slice's start, so the first to pull cannot take what
-- the others will need of its tail. Only a creation gets a TTL.
--
-- Returns left, the demands carried in, the host's record (its carried one
-- when it was carried), created (1: created here), or nil and an error
-- reply for a `left` that is no integer.
local function open_key(k, key, previous, host, rec, threshold, ttl)
  local left, created = k.got[1], 0
  if left == false then
    left, created = threshold, 1
  else
    left = tonumber(left)
    if left == nil or left ~= math.floor(left) or left < 0 then
      return nil, nil, nil, nil,
        redis.error_reply('FLOWCTRL key ' .. key .. ' does not hold an integer')
    end
  end
  local sum, before = 0, redis.call('HGETALL', previous)
  local carried = {}
  for i = 1, #before, 2 do
    if is_host(before[i]) then
      local f = fields(before[i + 1])
      if (f[2] or 0) > 0 and (f[6] or 0) > 0 then
        carried[#carried + 1] = before[i]
        carried[#carried + 1] = string.format('0 0 0 0 %d %d', f[5] or 0, f[6])
        sum = sum + f[6]
        if before[i] == host then rec = carried[#carried] end
      end
    end
  end
  redis.call('HSET', key, 'left', left, 'quota', left, 'demand', sum, unpack(carried))
  put(k, 'left', left)
  put(k, 'quota', left)
  put(k, 'demand', sum)
  for i = 1, #carried, 2 do put(k, carried[i], carried[i + 1]) end
  if created == 1 then redis.call('PEXPIRE', key, ttl) end
  return left, sum, rec, created
end
