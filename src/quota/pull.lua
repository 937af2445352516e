-- The pull script: see `PULL` in redis.rs for its keys, arguments and reply.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local slice_ms = tonumber(ARGV[3])
local slice = math.floor((sec * 1000 + math.floor(usec / 1000)) / slice_ms) % 4294967296
-- A version that is no whole number up to 2^53 is no record.
local version = tonumber(redis.call('HGET', KEYS[2], 'version')) or 0
if version ~= math.floor(version) or version < 0 or version > 9007199254740991 then version = 0 end
if version ~= (tonumber(ARGV[11]) or 0) then return {-2, version, sec, usec, 0, 0, 0, 0, 0, 0} end
local key, host = KEYS[1], ARGV[6]
-- A census record: accounted asked granted claimed offset_us demand.
local function fields(rec)
  local f = {}
  for v in string.gmatch(rec, '%-?%d+') do f[#f + 1] = tonumber(v) end
  return f
end
local function is_host(field)
  return field ~= 'left' and field ~= 'quota' and field ~= 'demand' and field ~= 'fair'
    and field ~= 'back'
end
-- The key, read once. A small hash comes whole from HSCAN's first call
-- (cursor 0 says it is whole: a compact hash always is, a larger one past
-- about SCAN fields is not), and stands for HMGET, HLEN and the fair tails'
-- HGETALL below: `all` holds each field once (one scan call over a hash
-- nobody writes meanwhile), `at` its value, `n` their count, and the
-- writes of this call are applied to them as they are made (`put`). A
-- larger one is read by name (HMGET) and counted (HLEN); `all` stays nil.
-- Either way the same fields are read.
local SCAN = 16
local all, at, n = nil, {}, 0
local function put(field, value)
  if at[field] == nil then
    n = n + 1
    all[#all + 1] = field
    all[#all + 1] = value
  else
    for i = 1, #all, 2 do if all[i] == field then all[i + 1] = value end end
  end
  at[field] = value
end
local scan = redis.call('HSCAN', key, 0, 'COUNT', SCAN)
local got
if scan[1] == '0' then
  all = scan[2]
  n = #all / 2
  for i = 1, #all, 2 do at[all[i]] = all[i + 1] end
  got = {at.left or false, at.quota or false, at.demand or false, at[host] or false,
    at.fair or false, at.back or false}
else
  got = redis.call('HMGET', key, 'left', 'quota', 'demand', host, 'fair', 'back')
end
-- The 13th field of the host's record: the slicing the shape key held at
-- the host's pull in this key that checked it, its TTL then set to two
-- slices and more (0: not checked, or not its own slicing). The shape
-- holds it to the slice's end: the host's later pulls in this key, cut the
-- same way, skip the check and answer as it would. A host on another's
-- slicing checks at every pull: the shape's expiry sends it back at once.
local shaped = 0
local mismatch, keeps_shape = 0, false
if ARGV[13] ~= '1' then
  local own = tonumber(ARGV[12])
  local mark = got[4] and string.match(got[4], '^' .. string.rep('%S+ ', 12) .. '(%d+)$')
  if slice_ms == own and mark == tostring(slice_ms) then
    shaped = slice_ms
  else
    local shape = tonumber(redis.call('GET', KEYS[3]))
    if shape == nil then
      if slice_ms ~= own then return {-3, own, sec, usec, 0, 0, 0, 0, 0, 0} end
      redis.call('SET', KEYS[3], own, 'PX', ARGV[5])
      shaped = own
    elseif shape ~= slice_ms then
      return {-3, shape, sec, usec, 0, 0, 0, 0, 0, 0}
    elseif shape == own then
      keeps_shape, shaped = true, own
    else
      mismatch = 1
    end
  end
end
if slice ~= tonumber(ARGV[4]) then return {-1, 0, sec, usec, 0, 0, 0, 0, 0, 0} end
local left, quota, demands, rec, cache = got[1], tonumber(got[2]), tonumber(got[3]) or 0, got[4], got[5]
-- What hosts gave back of the slice while idle (see below).
local back_total = tonumber(got[6]) or 0
-- A key no host has pulled from: created here, or written ahead by a
-- manager (`left` and `quota` only, its TTL set).
local created = 0
if left == false or got[3] == false then
  if left == false then
    left, created = tonumber(ARGV[1]), 1
  else
    left = tonumber(left)
    if left == nil or left ~= math.floor(left) or left < 0 then
      return redis.error_reply('FLOWCTRL key ' .. key .. ' does not hold an integer')
    end
  end
  -- The hosts that asked in the slice before, with their demand: present
  -- from the slice's start, so the first to pull cannot take what the
  -- others will need of its tail.
  local sum, before = 0, redis.call('HGETALL', KEYS[4])
  local carried = {}
  for i = 1, #before, 2 do
    if is_host(before[i]) then
      local f = fields(before[i + 1])
      if (f[2] or 0) > 0 and (f[6] or 0) > 0 then
        carried[#carried + 1] = before[i]
        carried[#carried + 1] = string.format('0 0 0 0 %d %d', f[5] or 0, f[6])
        sum = sum + f[6]
        -- The host's own record is now its carried one.
        if before[i] == host then rec = carried[#carried] end
      end
    end
  end
  redis.call('HSET', key, 'left', left, 'quota', left, 'demand', sum, unpack(carried))
  if all then
    put('left', left)
    put('quota', left)
    put('demand', sum)
    for i = 1, #carried, 2 do put(carried[i], carried[i + 1]) end
  end
  if created == 1 then redis.call('PEXPIRE', key, ARGV[5]) end
  quota, demands, cache = left, sum, false
else
  left = tonumber(left)
  if left == nil or left ~= math.floor(left) then
    return redis.error_reply('FLOWCTRL key ' .. key .. ' does not hold an integer')
  end
end
if left < 0 then left = 0 end
local acc, asked, granted, before, had, was_given = 0, 0, 0, 0, 0, 0
if rec then
  local f = fields(rec)
  acc, asked, granted, before, had = f[1] or 0, f[2] or 0, f[3] or 0, f[4] or 0, f[6] or 0
  was_given = f[12]
end
-- The shape's TTL is renewed by its hosts' first pull in each slice: the
-- pull that checks it (later ones in the slice skip the check, above).
if keeps_shape then redis.call('PEXPIRE', KEYS[3], ARGV[5]) end
local demand = math.max(tonumber(ARGV[14]) or 0, 0)
demands = demands + demand - had
local claimed = tonumber(ARGV[7]) or 0
-- What the host gave back while idle, of its claim (an older host sends
-- nothing: 0). The claim it holds is the rest.
local given = math.min(math.max(tonumber(ARGV[20]) or 0, 0), math.max(claimed, 0))
-- A record without it was last written by a script that knows no
-- give-backs (a process of an older build on this host's table): it may
-- have charged the host's give-back again, or only part of it (its charge
-- stops at an empty key). Counted as told: never put back twice, lost at
-- worst. Nor is what the key charges beyond the host's hold then handed
-- back as a lost grant (below): part of it may be that give-back.
local told_before = was_given == nil and given > 0
if was_given == nil then was_given = given end
quota = quota or tonumber(ARGV[1])
-- A host whose threshold differs from the key's creator's: counted there,
-- while every host spends by the key's numbers. Not so for the record's:
-- a key created before the record changed serves out its slice.
if ARGV[13] ~= '1' and quota ~= tonumber(ARGV[1]) then mismatch = 1 end
-- A host's claim only grows within a slice: a smaller one is another table
-- using the same host id.
local conflict = 0
if claimed < before then conflict = 1 end
local holds = claimed - given
if holds > acc then
  left = math.max(left - (holds - acc), 0)
  acc = holds
end
-- A give-back the key was not told of: back into the key. Never more than
-- the key charges beyond what the host holds: a key created anew never
-- charged it. The fair tails still count it as granted to the host: it had
-- its turn, and a host gone idle owed it again would keep it from the
-- others (measured: bursty 0.990-0.994 admitted with 0.9 % stranded, 0.989-
-- 0.994 with 1.0 % when owed again).
-- The field `back` is written with the record, below.
local back_field = {}
if conflict == 0 and given > was_given then
  local back = math.min(given - was_given, math.max(acc - holds, 0))
  left = math.min(left + back, quota)
  acc, was_given = acc - back, given
  if back > 0 then
    back_total = back_total + back
    back_field = {'back', back_total}
    if all then put('back', back_total) end
  end
end
-- A grant the host never received (its puller died before the deposit):
-- charged already, handed back once, not taken from the slice again.
local credit = 0
if ARGV[9] == '1' and conflict == 0 and not told_before and acc > holds then credit = acc - holds end
local want = tonumber(ARGV[2])
local grant = math.min(want, left)
local giving_back = ARGV[20] ~= nil
-- Smooth within the slice: the burst at once, the rest evenly over it,
-- cluster-wide (`store::released`); ms until the ask will have been released.
local burst = tonumber(ARGV[10]) or quota
-- The release is the key's: a host whose numbers are another threshold's
-- (a record moved mid-slice) scales its burst to the key's quota.
local own_quota = tonumber(ARGV[1]) or quota
if own_quota > 0 and own_quota ~= quota then burst = math.max(math.floor(burst * quota / own_quota), 1) end
local elapsed = (sec * 1000 + math.floor(usec / 1000)) % slice_ms
local released = math.min(quota, math.floor(quota * elapsed / slice_ms) + burst)
local room = math.max(released - (quota - left), 0)
-- Fair tails: while the hosts' demands add up to more than the slice, each
-- host is owed min(its demand, an equal share) of it, released over the
-- slice; a host past what it is owed takes only what nobody else is owed.
-- A host below the equal share is owed a quarter slice ahead (its next
-- pull at its rate), so it is never refused while a bigger one is served.
-- What the hosts are owed comes from a pass over their records (O(hosts)):
-- past 64 hosts at most every tenth of a slice, kept in the field `fair` ("at,owed,growth,
-- within,entitled": ms into the slice, what all were owed then, at what
-- rate per slice the owed of those behind grew, what was granted within
-- what was owed since, and the hosts' min(demand, share) summed); in
-- between, that sum grown at that rate, less the grants within it. An
-- estimate: it moves what a host past its due may take, never the slice's
-- total. (An older script counts the field as a host with no demand.)
local owed_cut, shared_out = false, false
-- Counted as HLEN would count the key with `back` written.
if not all then
  n = redis.call('HLEN', key)
  if back_field[1] and got[6] == false then n = n + 1 end
end
local hosts = n - 3
if cache then hosts = hosts - 1 end
if back_total > 0 then hosts = hosts - 1 end
if rec == false then hosts = hosts + 1 end
local mine, fair_share = 0, 0
local c = {}
if cache then c = fields(cache) end
if demands > quota and hosts > 1 then
  local share = quota / hosts
  shared_out, fair_share = true, share
  -- Owed as the slice is released, its burst included: the burst is
  -- everyone's share, not the first asker's. Past 100 hosts, where
  -- reservations give the release out ahead, as time passes.
  local lead = 0
  if hosts <= 100 then lead = burst / quota end
  local function at(e) return math.min(1, e / slice_ms + lead) end
  local now = at(elapsed)
  local ahead = math.min(1, now + 0.25)
  local function part(d)
    if d < share then return d, ahead end
    return share, now
  end
  local function owed(d, g)
    local e, f = part(d)
    return math.max(math.floor(e * f) - g, 0)
  end
  -- What a host has had of the slice: what the key charged it (its claim
  -- and every grant since), or its grants when more (a give-back put back
  -- still counts as had). A host back from a fallback claimed what it
  -- admitted meanwhile and keeps to its share; owed that again, or owed
  -- what it spent of its last grant without asking again, it could not
  -- take it and nobody else could either.
  mine = owed(demand, math.max(granted, acc))
  if grant > mine then
    if hosts <= 64 or c[5] == nil or elapsed < c[1] or elapsed - c[1] >= slice_ms / 10 then
      local e, f = part(demand)
      c = {elapsed, mine, 0, 0, 0}
      if f < 1 then
        c[5] = e
        if mine > 0 then c[3] = e end
      end
      all = all or redis.call('HGETALL', key)
      for i = 1, #all, 2 do
        if is_host(all[i]) and all[i] ~= host then
          local r = fields(all[i + 1])
          local d, g = r[6] or 0, math.max(r[3] or 0, r[1] or 0)
          e, f = part(d)
          local o = math.max(math.floor(e * f) - g, 0)
          c[2] = c[2] + o
          if f < 1 then
            c[5] = c[5] + e
            if o > 0 then c[3] = c[3] + e end
          end
        end
      end
    end
    local all_owed = c[2] + math.floor(c[3] * (now - at(c[1]))) - c[4]
    local free = math.max(mine, room - math.max(all_owed - mine, 0))
    if free < room then
      room, owed_cut = free, true
    end
  end
end
-- Past 100 hosts the release may be given out ahead (reservations, below):
-- a host owed its whole ask by the fair tails is not queued behind them.
if ARGV[19] == '1' and hosts > 100 and shared_out and grant <= mine then
  room = math.max(room, grant)
end
-- Less than the grant released: what is, if at least half or what the
-- fair tails owe the host, else none (a sliver is not worth a round trip,
-- but what a host is owed is: held back for want of half its ask, the host
-- that pulled second in a slice shared out fell behind for all of it).
if grant > room then
  if 2 * room < grant and not (shared_out and mine > 0) then grant = 0 else grant = room end
end
-- The wait until the slice will have released another full ask beyond what
-- it has given: the host does not ask before (each ask would be a sliver).
local wait = 0
local target = quota - left + grant + math.min(want, left - grant)
if target > released and left > grant then
  wait = math.max(math.ceil((target - math.min(burst, target)) * slice_ms / quota) - elapsed, 1)
end
-- Held back for the others: ask again when the slice has released another
-- half ask (the least a grant is worth, as above).
if owed_cut and grant < want and left > grant then
  wait = math.max(wait, math.ceil(want * slice_ms / quota / 2))
end
-- While the slice is shared out, a host given less than it asked asks again
-- when its own demand will have used another half ask: the slice's release
-- is every host's to share, and a thousand hosts each told when the slice
-- will have released their ask (a millisecond) would each ask then. A host
-- that reports no demand yet (it just started) is not held so, and none
-- longer than a quarter slice: a host that joined at the end of the last
-- slice reports the few requests it had there, and half an ask at that
-- pace was a wait of a whole slice, or many. A host that gave quota back
-- while idle in this slice asks in bursts, at many times the pace its
-- demand says: no longer than an eighth (a quarter held a burst of a
-- tenth of a slice back whole, measured in the simulation).
if shared_out and demand > 0 and grant < want and left > grant then
  local most = slice_ms / 4
  if given > 0 then most = slice_ms / 8 end
  wait = math.max(wait, math.min(math.ceil(want / 2 / demand * slice_ms), math.ceil(most)))
end
-- A new slice releases anew: no wait runs past this one's end.
wait = math.min(wait, slice_ms - elapsed)
-- A pull for nothing (a give-back's own) is not paced.
if want == 0 then wait = 0 end
-- Used up, to a host that can give back too (it sends ARGV 20): an idle
-- host may give quota back, so the host asks again in a tenth of a slice
-- rather than never in this one. Past 100 hosts only once some did (a
-- thousand hosts asking ten times more each slice for nothing).
if giving_back and (back_total > 0 or hosts <= 100) and want > 0 and left == 0 and grant == 0 then
  wait = math.max(math.min(math.ceil(slice_ms / 10), slice_ms - elapsed), 0)
end
-- A reservation: past 100 hosts, an ask held back (by the release or the
-- fair tails) is granted now, to be spent only after the wait, when asking
-- again would have been granted; the host keeps it aside meanwhile (ARGV
-- 19 = '1' says it can). One round trip where a refusal and the ask after
-- it were two: the key, the release and every host's due count it from now.
-- At least half an ask, as a grant, and only what the host spends by the
-- slice's end at its demand: a reservation it cannot use is quota stranded.
-- A host held by the fair tails is reserved its ask too: it queues behind
-- the release like the others, and a host owed its whole ask is served at
-- once (above). What that costs the smallest hosts is measured
-- (benches/GLOBAL.md, "The simulation"): capping reservations at what a host is owed, or at
-- what leaves the small hosts' rest, gave back the round trips or left
-- the slice unspent.
local usable = 0
if ARGV[19] == '1' and hosts > 100 and grant == 0 and wait > 0 and demand > 0 and left > 0 then
  local at = elapsed + wait
  local r = math.min(want, left)
  if 2 * r >= want and at + math.ceil(r * slice_ms / demand) <= slice_ms then
    grant, usable = r, wait
  end
end
-- The record: accounted asked granted claimed offset_us demand, then what
-- the host's releases reported in the slice so far: success dropped
-- mean_us p99_us, then the threshold the host would create keys with when
-- it spends by its own numbers, not the record's (0 when by the record),
-- what it gave back told (12th), and the slicing its shape check found
-- (13th, see above; 0: none). A script that knows 12 fields reads them
-- alike and writes 12: the host's next pull checks the shape again.
local own_numbers = 0
if ARGV[13] ~= '1' then own_numbers = tonumber(ARGV[1]) or 0 end
local function count(i) return math.max(tonumber(ARGV[i]) or 0, 0) end
local fair = {}
if shared_out and c[5] ~= nil then
  fair = {'fair', string.format('%d,%d,%d,%d,%d', c[1], c[2], c[3], c[4] + math.min(grant, mine), c[5])}
end
if back_field[1] then
  fair[#fair + 1] = back_field[1]
  fair[#fair + 1] = back_field[2]
end
redis.call('HSET', key, 'left', left - grant, 'demand', demands, host,
  string.format('%d %d %d %d %d %d %d %d %d %d %d %d %d', acc + grant, asked + want,
    granted + grant, claimed, tonumber(ARGV[8]) or 0, demand, count(15), count(16), count(17),
    count(18), own_numbers, was_given, shaped), unpack(fair))
return {grant + credit, left - grant, sec, usec, hosts, conflict, wait, mismatch, created, usable}
