-- Reservations, past MANY_HOSTS hosts and only to a host that can keep one
-- aside (ARGV 19 = '1'). An ask held back (by the release or the fair
-- tails) is granted now, to be spent only after the wait, when asking again
-- would have been granted: one round trip where a refusal and the ask after
-- it were two. The key, the release and every host's due count it from now.

-- A host owed at least half its ask by the fair tails is not queued behind
-- the others' reservations for what it is owed: the room is at least that
-- (less is a sliver, not worth its round trip).
local function owed_at_once(room, grant, mine, can_keep, hosts, shared_out)
  if can_keep and hosts > MANY_HOSTS and shared_out and 2 * mine >= grant then
    return math.max(room, math.min(grant, mine))
  end
  return room
end

-- The reservation for an ask granted nothing and told to wait: at least
-- half an ask, as a grant, and only what the host spends by the slice's end
-- at its demand (a reservation it cannot use is quota stranded; one cut to
-- that, when it is most of the ask, saves the asks that would follow). A host
-- held by the fair tails is reserved its ask too: it queues behind the
-- release like the others (benches/GLOBAL.md, "The simulation", measures
-- what capping reservations cost instead), and no further than the fair
-- tails let it take of what is left (`most`; a host's `rest` of its
-- entitlement is worth reserving however small). Returns the grant and the
-- ms until it is usable (0: at once, or no reservation).
local function reserve(can_keep, hosts, grant, wait, want, left, demand, elapsed, slice_ms, rest, most)
  if can_keep and hosts > MANY_HOSTS and grant == 0 and wait > 0 and demand > 0 and left > 0 then
    local r = math.min(want, left, most or left)
    local worth = 2 * r >= want or rest ~= nil and rest > 0 and r >= rest
    -- What it spends by the slice's end after the wait, if most of it.
    local spent = math.floor(math.max(slice_ms - elapsed - wait, 0) * demand / slice_ms)
    if 3 * spent >= 2 * r then r = math.min(r, spent) end
    if r > 0 and worth and elapsed + wait + math.ceil(r * slice_ms / demand) <= slice_ms then
      return r, wait
    end
  end
  return grant, 0
end
