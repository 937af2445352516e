-- The core: one pull of a slice's key. The store's clock names the slice;
-- the record's version and the slicing are checked; the key is created (or
-- carried in) once; the host's claim is deducted once; the grant is what
-- the release leaves, cut by the fair tails; the host's census record and
-- the reply are written last.
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local slice_ms = tonumber(ARGV[3])
local slice = math.floor((sec * 1000 + math.floor(usec / 1000)) / slice_ms) % 4294967296
-- Flags: 1, the host spends by the record's numbers; 2, its task is not
-- spread over shards (KEYS[2] is the record itself, not a shard's copy);
-- above those, 4 × the task's shards when spread (an older host sends
-- none: one).
local flags = tonumber(ARGV[13]) or 0
local by_record, unsharded = flags % 2 == 1, flags % 4 >= 2
local shards = math.floor(flags / 4)
if not (shards >= 1 and shards <= 8) then shards = 1 end
-- A version that is no whole number up to 2^53 is no record.
local numbers = redis.call('HMGET', KEYS[2], 'version', 'slice_ms', 'shards')
local version = tonumber(numbers[1]) or 0
if version ~= math.floor(version) or version < 0 or version > 9007199254740991 then version = 0 end
-- The record changed since the host's last pull. To an unsharded task's
-- host the record comes with the reply, after its ten integers, and a
-- record that keeps the host's slicing and one shard does not stop the
-- pull: the slice's key holds the slice's threshold, whatever the host
-- sent (below, a key still to be made stops it: it would be made by the
-- host's old numbers). Its slicing is then the record's: no shape check.
local stale = version ~= (tonumber(ARGV[11]) or 0)
local function with_record(reply)
  if unsharded and version > 0 then
    reply[11] = version
    local f = redis.call('HGETALL', KEYS[2])
    for i = 1, #f do reply[11 + i] = f[i] end
  end
  return reply
end
local function refresh() return with_record({-2, version, sec, usec, 0, 0, 0, 0, 0, 0}) end
if stale and not (unsharded and version > 0 and tonumber(numbers[2]) == slice_ms
    and (tonumber(numbers[3]) or 1) <= 1) then
  return refresh()
end
local key, host = KEYS[1], ARGV[6]
local k = read_key(key, host)
local got = k.got
local shaped, mismatch, keeps_shape, slicing =
  check_shape(got[4], KEYS[3], slice_ms, tonumber(ARGV[12]), ARGV[5], by_record or stale)
if slicing then return {-3, slicing[1], sec, usec, 0, 0, 0, 0, 0, 0} end
if slice ~= tonumber(ARGV[4]) then return {-1, 0, sec, usec, 0, 0, 0, 0, 0, 0} end
if stale and got[1] == false then return refresh() end

local left, quota, demands, rec, cache = got[1], tonumber(got[2]), tonumber(got[3]) or 0, got[4], got[5]
-- What hosts gave back of the slice while idle (30).
local back_total = tonumber(got[6]) or 0
local created = 0
if left == false or got[3] == false then
  local err
  left, demands, rec, created, err = open_key(k, key, KEYS[4], host, rec, tonumber(ARGV[1]), ARGV[5])
  if err then return err end
  quota, cache = left, false
else
  left = tonumber(left)
  if left == nil or left ~= math.floor(left) then
    return redis.error_reply('FLOWCTRL key ' .. key .. ' does not hold an integer')
  end
end
if left < 0 then left = 0 end
local acc, asked, granted, before, had, told = 0, 0, 0, 0, 0, 0
if rec then
  local f = fields(rec)
  acc, asked, granted, before, had = f[1] or 0, f[2] or 0, f[3] or 0, f[4] or 0, f[6] or 0
  told = f[12]
end
-- The shape's TTL is renewed by its hosts' first pull in each slice (15).
if keeps_shape then redis.call('PEXPIRE', KEYS[3], ARGV[5]) end
local demand = math.max(tonumber(ARGV[14]) or 0, 0)
demands = demands + demand - had

-- The claim: every permit the host took of the slice. It only grows within
-- a slice: a smaller one is another table using the same host id (a
-- conflict). What it claims beyond what the key charged it, it took from a
-- key the store lost or in fallback: deducted once, then charged.
local claimed = tonumber(ARGV[7]) or 0
local given, told_before
given, told, told_before = gave_back(claimed, ARGV[20], told)
quota = quota or tonumber(ARGV[1])
-- A host whose threshold differs from the key's creator's: counted there,
-- while every host spends by the key's numbers. Not so for the record's:
-- a key created before the record changed serves out its slice.
if not (by_record or stale) and quota ~= tonumber(ARGV[1]) then mismatch = 1 end
local conflict = 0
if claimed < before then conflict = 1 end
local holds = claimed - given
if holds > acc then
  left = math.max(left - (holds - acc), 0)
  acc = holds
end
local back_field = {}
if conflict == 0 then
  local back
  left, acc, told, back = put_back(given, told, acc, holds, left, quota)
  if back > 0 then
    back_total = back_total + back
    back_field = {'back', back_total}
    put(k, 'back', back_total)
  end
end
-- A grant the host never received (its puller died before the deposit):
-- charged already, handed back once, not taken from the slice again.
local credit = 0
if ARGV[9] == '1' and conflict == 0 and not told_before and acc > holds then credit = acc - holds end

-- The grant: what the release leaves. The burst at once, the rest evenly
-- over the slice, cluster-wide (`store::released`). The release is the
-- key's: a host whose numbers are another threshold's (a record moved
-- mid-slice) scales its burst to the key's quota.
local want = tonumber(ARGV[2])
local grant = math.min(want, left)
local burst = tonumber(ARGV[10]) or quota
local own_quota = tonumber(ARGV[1]) or quota
if own_quota > 0 and own_quota ~= quota then burst = math.max(math.floor(burst * quota / own_quota), 1) end
local elapsed = (sec * 1000 + math.floor(usec / 1000)) % slice_ms
local released = math.min(quota, math.floor(quota * elapsed / slice_ms) + burst)
local room = math.max(released - (quota - left), 0)
-- The hosts in the key, this one included.
local hosts = field_count(k, key, back_field[1] ~= nil) - 3
if cache then hosts = hosts - 1 end
if back_total > 0 then hosts = hosts - 1 end
if rec == false then hosts = hosts + 1 end
local owed_cut, shared_out, mine, c, rest, most
room, owed_cut, shared_out, mine, c, rest, most = fair_room({
  quota = quota, demands = demands, hosts = hosts, burst = burst, elapsed = elapsed,
  slice_ms = slice_ms, demand = demand, had = math.max(granted, acc), grant = grant,
  room = room, cache = cache, host = host, left = left,
  records = function() return all_fields(k, key) end,
})
local can_keep = ARGV[19] == '1'
room = owed_at_once(room, grant, mine, can_keep, hosts, shared_out)
-- A shard is asked for the host's whole ask (it takes what one shard
-- has), but releases only its part: what is worth a round trip, and how
-- long to wait for it, is the ask's share of this shard (`pace`), as one
-- key measures the whole ask.
local pace = math.ceil(want / shards)
-- Less than the grant released: what is, if at least half (of the ask's
-- share) or what the fair tails owe the host (now, or the rest of its
-- entitlement), else none (a sliver is not worth a round trip, but what a
-- host is owed is).
if grant > room then
  local owed = shared_out and (mine > 0 or rest ~= nil and rest > 0 and room >= rest)
  if 2 * room < math.min(grant, pace) and not owed then grant = 0 else grant = room end
end
local wait = wait_for({
  quota = quota, left = left, grant = grant, want = want, pace = pace, released = released,
  burst = burst, elapsed = elapsed, slice_ms = slice_ms, owed_cut = owed_cut,
  shared_out = shared_out, demand = demand, given = given, giving_back = ARGV[20] ~= nil,
  back = back_total, hosts = hosts,
})
local usable
grant, usable = reserve(can_keep, hosts, grant, wait, want, left, demand, elapsed, slice_ms, rest, most)
-- A host done for the slice is told to wait to its end: past a
-- reservation's usable time, the host reads it as done (it asks nothing
-- more in this slice). Not to a shard of a spread task: its other shards
-- may hold more. Up to MANY_HOSTS, to a host that gives idle quota back,
-- only a quarter slice and never as done: an idle host's give-back may
-- come after it (past that, the round trips of the many cost more).
if unsharded and done_for_slice(rest, most, c[6], demand, grant, left, elapsed, slice_ms) then
  if ARGV[20] ~= nil and hosts <= MANY_HOSTS then
    wait = math.max(wait, math.min(math.ceil(slice_ms / 4), slice_ms - elapsed))
    if usable > 0 then wait = usable end
  else
    wait = slice_ms - elapsed
  end
end

-- The record: accounted asked granted claimed offset_us demand, then what
-- the host's releases reported in the slice so far: success dropped
-- mean_us p99_us, then the threshold the host would create keys with when
-- it spends by its own numbers, not the record's (0 when by the record),
-- what it gave back told (12th), and the slicing its shape check found
-- (13th, see 15; 0: none). A script that knows 12 fields reads them alike
-- and writes 12: the host's next pull checks the shape again.
local own_numbers = 0
if not (by_record or stale) then own_numbers = tonumber(ARGV[1]) or 0 end
local function count(i) return math.max(tonumber(ARGV[i]) or 0, 0) end
local extra = fair_field(c, shared_out, grant, mine, rest)
if back_field[1] then
  extra[#extra + 1] = back_field[1]
  extra[#extra + 1] = back_field[2]
end
redis.call('HSET', key, 'left', left - grant, 'demand', demands, host,
  string.format('%d %d %d %d %d %d %d %d %d %d %d %d %d', acc + grant, asked + want,
    granted + grant, claimed, tonumber(ARGV[8]) or 0, demand, count(15), count(16), count(17),
    count(18), own_numbers, told, shaped), unpack(extra))
local reply = {grant + credit, left - grant, sec, usec, hosts, conflict, wait, mismatch, created, usable}
if stale then return with_record(reply) end
return reply
