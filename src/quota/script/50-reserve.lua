-- Reservations, past MANY_HOSTS hosts and only to a host that can keep one
-- aside (ARGV 19 = '1'). An ask held back (by the release or the fair
-- tails) is granted now, to be spent only after the wait, when asking again
-- would have been granted: one round trip where a refusal and the ask after
-- it were two. The key, the release and every host's due count it from now.

-- A host owed its whole ask by the fair tails is not queued behind the
-- others' reservations: the room is at least its grant.
local function owed_at_once(room, grant, mine, can_keep, hosts, shared_out)
  if can_keep and hosts > MANY_HOSTS and shared_out and grant <= mine then
    return math.max(room, grant)
  end
  return room
end

-- The reservation for an ask granted nothing and told to wait: at least
-- half an ask, as a grant, and only what the host spends by the slice's end
-- at its demand (a reservation it cannot use is quota stranded). A host
-- held by the fair tails is reserved its ask too: it queues behind the
-- release like the others (benches/GLOBAL.md, "The simulation", measures
-- what capping reservations cost instead). Returns the grant and the ms
-- until it is usable (0: at once, or no reservation).
local function reserve(can_keep, hosts, grant, wait, want, left, demand, elapsed, slice_ms)
  if can_keep and hosts > MANY_HOSTS and grant == 0 and wait > 0 and demand > 0 and left > 0 then
    local r = math.min(want, left)
    if 2 * r >= want and elapsed + wait + math.ceil(r * slice_ms / demand) <= slice_ms then
      return r, wait
    end
  end
  return grant, 0
end
