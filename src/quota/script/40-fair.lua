-- Fair tails. While the hosts' demands add up to more than the slice, each
-- host is entitled to min(its demand, the water level) of it: the level at
-- which those entitlements add up to the slice (max-min fairness). It is
-- owed that as the slice is released (a host below the level its next
-- chunk ahead, AHEAD, so it is never refused while a bigger one is
-- served); a host past what it is owed now takes only what
-- nobody else is owed now, and a host past its whole entitlement only what
-- is left beyond the rests of everyone else who asked in the slice: its
-- last chunks go to the hosts still short of their level, not to whoever
-- asks first. (A host carried in from the last slice that has not asked
-- in this one holds only what it is owed by now, and after the slice's
-- first tenth nothing: gone, it would hold its share to the end; come
-- later, it is owed as the slice is released.)
--
-- What the hosts are owed comes from a pass over their records (O(hosts)):
-- past FAIR_CACHED hosts at most every tenth of a slice, kept in the field
-- `fair` ("at,owed,growth,within,entitled,level,rest,rest_within": ms into
-- the slice, what all were owed then, at what rate per slice the owed of
-- those behind grew, what was granted within what was owed since, the
-- entitlements of hosts below the level summed, the level, the hosts'
-- rests, and what was granted within those rests since); in between, the
-- sums moved by time and the grants since. An estimate: it moves what a
-- host past its due may take, never the slice's total. (An older script
-- counts the field as a host with no demand, and reads its first five.)
local FAIR_CACHED = 64

-- How far ahead of the release a host below the level is owed: its next
-- chunk (a third of a slice at its rate) asked with a quarter of the last
-- one left, so a host keeping its pace is owed each ask whole when it asks.
local AHEAD = 1 / 3 + 1 / 12

-- The water level of `demands` (a list, sorted here) sharing `quota`: the
-- least L with the sum of min(d, L) at least the quota; the quota when the
-- demands fit in it whole.
local function water_level(demands, quota)
  table.sort(demands)
  local left, n = quota, #demands
  for i = 1, n do
    local even = left / (n - i + 1)
    if demands[i] >= even then return math.floor(even) end
    left = left - demands[i]
  end
  return quota
end

-- What is left of a host's entitlement to the slice's end.
local function rest_of(demand, level, had)
  return math.max(math.min(demand, level) - had, 0)
end

-- `s`: quota, demands (the hosts' summed), hosts, burst, elapsed, slice_ms,
-- demand (this host's), had (what it has had of the slice), grant (what it
-- would be granted), room (what the release leaves), left (what the key
-- has left), cache (the field `fair`, or false) and records (a function
-- answering the key's fields). Returns the room left to this host, whether
-- the fair tails cut it, whether the slice is shared out, what the host is
-- owed now, the cache, what is left of its whole entitlement, and the most
-- it may take of what the key has left (both nil: not known).
local function fair_room(s)
  local room, owed_cut, shared_out, mine = s.room, false, false, 0
  local c = {}
  if s.cache then c = fields(s.cache) end
  -- (Each test as written, not its converse: a NaN from a damaged key
  -- fails every comparison, and must fail the same one as ever.)
  if not (s.demands > s.quota and s.hosts > 1) then return room, owed_cut, shared_out, mine, c, nil, nil end
  shared_out = true
  -- Owed as the slice is released, its burst included: the burst is
  -- everyone's share, not the first asker's. Past MANY_HOSTS, where
  -- reservations give the release out ahead, as time passes.
  local lead = 0
  if s.hosts <= MANY_HOSTS then lead = s.burst / s.quota end
  local function at(e) return math.min(1, e / s.slice_ms + lead) end
  local now = at(s.elapsed)
  local ahead = math.min(1, now + AHEAD)
  -- The level: the last pass's, or an equal share before any (a cache
  -- of an older script, or damaged, is made again).
  local cached = c[8] ~= nil and c[6] >= 0
  local level = s.quota / s.hosts
  if cached then level = c[6] end
  local function part(d)
    if d < level then return d, ahead end
    return level, now
  end
  -- What a host has had of the slice: what the key charged it (its claim
  -- and every grant since), or its grants when more (a give-back put back
  -- still counts as had). A host back from a fallback claimed what it
  -- admitted meanwhile and keeps to its share; owed that again, or owed
  -- what it spent of its last grant without asking again, it could not
  -- take it and nobody else could either.
  local function owed(d, had)
    local e, f = part(d)
    return math.max(math.floor(e * f) - had, 0)
  end
  mine = owed(s.demand, s.had)
  local rest
  if cached then rest = rest_of(s.demand, level, s.had) end
  if not (s.grant > mine) then return room, owed_cut, shared_out, mine, c, rest, nil end
  if s.hosts <= FAIR_CACHED or not cached or s.elapsed < c[1]
      or s.elapsed - c[1] >= s.slice_ms / 10 then
    -- A host carried in that has not asked by the slice's first tenth is
    -- gone: owed nothing, it still counts in the level (what the others
    -- are entitled to is then less than the slice, and a host past its
    -- own takes the rest).
    local expected = 10 * s.elapsed < s.slice_ms
    local demands, had, came, sorted = {}, {}, {}, {}
    local function add(d, g, asked)
      d = math.max(d, 0)
      sorted[#sorted + 1] = d
      if not (asked > 0 or expected) then return end
      demands[#demands + 1], had[#had + 1] = d, g
      came[#came + 1] = asked > 0
    end
    add(s.demand, s.had, 1)
    local all = s.records()
    for i = 1, #all, 2 do
      if is_host(all[i]) and all[i] ~= s.host then
        local r = fields(all[i + 1])
        add(r[6] or 0, math.max(r[3] or 0, r[1] or 0), r[2] or 0)
      end
    end
    level = water_level(sorted, s.quota)
    mine = owed(s.demand, s.had)
    rest = rest_of(s.demand, level, s.had)
    c = {s.elapsed, mine, 0, 0, 0, level, 0, 0}
    for i = 1, #demands do
      local e, f = part(demands[i])
      if i > 1 then c[2] = c[2] + owed(demands[i], had[i]) end
      if f < 1 then
        c[5] = c[5] + e
        if owed(demands[i], had[i]) > 0 then c[3] = c[3] + e end
      end
      if came[i] then
        c[7] = c[7] + rest_of(demands[i], level, had[i])
      else
        c[7] = c[7] + owed(demands[i], had[i])
      end
    end
  end
  local all_owed = c[2] + math.floor(c[3] * (now - at(c[1]))) - c[4]
  local free = math.max(mine, room - math.max(all_owed - mine, 0))
  -- Past its whole entitlement, only what the others' rests leave.
  local most = math.max(rest, s.left - math.max(c[7] - c[8] - rest, 0))
  free = math.min(free, most)
  if free < room then room, owed_cut = math.max(free, 0), true end
  return room, owed_cut, shared_out, mine, c, rest, most
end

-- The field `fair` to write with the record: the cache, with what this
-- pull granted within what the host was owed now (`mine`) and within its
-- rest (`rest`; nil: not known).
local function fair_field(c, shared_out, grant, mine, rest)
  if not (shared_out and c[5] ~= nil) then return {} end
  local v = string.format('%d,%d,%d,%d,%d', c[1], c[2], c[3], c[4] + math.min(grant, mine), c[5])
  if c[8] ~= nil then
    v = v .. string.format(',%d,%d,%d', c[6], c[7], c[8] + math.min(grant, rest or 0))
  end
  return {'fair', v}
end
