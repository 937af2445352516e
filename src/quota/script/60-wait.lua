-- Waits: when a host given less than it asked asks again. Each rule keeps
-- a host from asking for a sliver; a new slice releases anew, so no wait
-- runs past this one's end.
--
-- `w`: quota, left, grant, want, pace (the share of the ask this key
-- releases: on a shard of a spread task, the ask over the shards; by
-- default the whole ask), released (of the slice by now), burst,
-- elapsed, slice_ms, owed_cut (the fair tails cut the grant), shared_out,
-- demand, given (the host gave back in this slice), giving_back (it can),
-- back (what hosts gave back of the slice), hosts. Returns ms.
local function wait_for(w)
  local wait, pace = 0, w.pace or w.want
  -- Until the slice will have released another full ask beyond what it has
  -- given.
  local target = w.quota - w.left + w.grant + math.min(pace, w.left - w.grant)
  if target > w.released and w.left > w.grant then
    wait = math.max(math.ceil((target - math.min(w.burst, target)) * w.slice_ms / w.quota)
      - w.elapsed, 1)
  end
  -- Held back for the others: until the slice has released another half
  -- ask (the least a grant is worth).
  if w.owed_cut and w.grant < w.want and w.left > w.grant then
    wait = math.max(wait, math.ceil(pace * w.slice_ms / w.quota / 2))
  end
  -- While the slice is shared out: until the host's own demand will have
  -- used another half ask. The release is every host's to share, and a
  -- thousand hosts each told when it will have released their ask (a
  -- millisecond) would each ask then. A host that reports no demand yet
  -- (it just started) is not held so, and none longer than a quarter slice
  -- (a host that joined at the end of the last slice reports the few
  -- requests it had there: half an ask at that pace was a wait of a slice,
  -- or many); a host that gave quota back while idle in this slice asks in
  -- bursts, at many times its demand's pace: no longer than an eighth.
  if w.shared_out and w.demand > 0 and w.grant < w.want and w.left > w.grant then
    local most = w.slice_ms / 4
    if w.given > 0 then most = w.slice_ms / 8 end
    wait = math.max(wait, math.min(math.ceil(w.want / 2 / w.demand * w.slice_ms), math.ceil(most)))
  end
  wait = math.min(wait, w.slice_ms - w.elapsed)
  -- A pull for nothing (a give-back's own) is not paced.
  if w.want == 0 then wait = 0 end
  -- Used up, to a host that can give back too: an idle host may give quota
  -- back, so the host asks again in a tenth of a slice rather than never in
  -- this one; past MANY_HOSTS only once some did.
  if w.giving_back and (w.back > 0 or w.hosts <= MANY_HOSTS) and w.want > 0 and w.left == 0
      and w.grant == 0 then
    wait = math.max(math.min(math.ceil(w.slice_ms / 10), w.slice_ms - w.elapsed), 0)
  end
  return wait
end

-- Whether a host is done for the slice: at the water level (`level`),
-- granted (or reserved) the whole rest of its entitlement, or past it,
-- with nothing beyond the others' rests (`rest`, `most`: see 40). Not so
-- below the level (entitled to its demand, which may grow past what it
-- reported), nor in the slice's first tenth, before a host's demand is its
-- pace in this slice (one that joined in the last reports what it asked
-- there).
local function done_for_slice(rest, most, level, demand, grant, left, elapsed, slice_ms)
  return rest ~= nil and most ~= nil and level ~= nil and demand >= level and grant >= rest
    and most <= rest and (grant > 0 or left > 0) and 10 * elapsed >= slice_ms
end
