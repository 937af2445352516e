-- Fair tails. While the hosts' demands add up to more than the slice, each
-- host is owed min(its demand, an equal share) of it, released over the
-- slice; a host past what it is owed takes only what nobody else is owed.
-- A host below the equal share is owed a quarter slice ahead (its next
-- pull at its rate), so it is never refused while a bigger one is served.
--
-- What the hosts are owed comes from a pass over their records (O(hosts)):
-- past FAIR_CACHED hosts at most every tenth of a slice, kept in the field
-- `fair` ("at,owed,growth,within,entitled": ms into the slice, what all
-- were owed then, at what rate per slice the owed of those behind grew,
-- what was granted within what was owed since, and the hosts' min(demand,
-- share) summed); in between, that sum grown at that rate, less the grants
-- within it. An estimate: it moves what a host past its due may take,
-- never the slice's total. (An older script counts the field as a host
-- with no demand.)
local FAIR_CACHED = 64

-- `s`: quota, demands (the hosts' summed), hosts, burst, elapsed, slice_ms,
-- demand (this host's), had (what it has had of the slice), grant (what it
-- would be granted), room (what the release leaves), cache (the field
-- `fair`, or false) and records (a function answering the key's fields).
-- Returns the room left to this host, whether the fair tails cut it, whether
-- the slice is shared out, what the host is owed now, and the cache.
local function fair_room(s)
  local room, owed_cut, shared_out, mine = s.room, false, false, 0
  local c = {}
  if s.cache then c = fields(s.cache) end
  -- (Each test as written, not its converse: a NaN from a damaged key
  -- fails every comparison, and must fail the same one as ever.)
  if not (s.demands > s.quota and s.hosts > 1) then return room, owed_cut, shared_out, mine, c end
  local share = s.quota / s.hosts
  shared_out = true
  -- Owed as the slice is released, its burst included: the burst is
  -- everyone's share, not the first asker's. Past MANY_HOSTS, where
  -- reservations give the release out ahead, as time passes.
  local lead = 0
  if s.hosts <= MANY_HOSTS then lead = s.burst / s.quota end
  local function at(e) return math.min(1, e / s.slice_ms + lead) end
  local now = at(s.elapsed)
  local ahead = math.min(1, now + 0.25)
  local function part(d)
    if d < share then return d, ahead end
    return share, now
  end
  -- What a host has had of the slice: what the key charged it (its claim
  -- and every grant since), or its grants when more (a give-back put back
  -- still counts as had). A host back from a fallback claimed what it
  -- admitted meanwhile and keeps to its share; owed that again, or owed
  -- what it spent of its last grant without asking again, it could not
  -- take it and nobody else could either.
  local e, f = part(s.demand)
  mine = math.max(math.floor(e * f) - s.had, 0)
  if not (s.grant > mine) then return room, owed_cut, shared_out, mine, c end
  if s.hosts <= FAIR_CACHED or c[5] == nil or s.elapsed < c[1]
      or s.elapsed - c[1] >= s.slice_ms / 10 then
    e, f = part(s.demand)
    c = {s.elapsed, mine, 0, 0, 0}
    if f < 1 then
      c[5] = e
      if mine > 0 then c[3] = e end
    end
    local all = s.records()
    for i = 1, #all, 2 do
      if is_host(all[i]) and all[i] ~= s.host then
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
  if free < room then room, owed_cut = free, true end
  return room, owed_cut, shared_out, mine, c
end

-- The field `fair` to write with the record: the cache, with what this
-- pull granted within what the host was owed.
local function fair_field(c, shared_out, grant, mine)
  if shared_out and c[5] ~= nil then
    return {'fair', string.format('%d,%d,%d,%d,%d', c[1], c[2], c[3], c[4] + math.min(grant, mine), c[5])}
  end
  return {}
end
