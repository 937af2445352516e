-- The pull script (`PULL` in script.rs: its keys, arguments and reply), in
-- sections Redis runs as one script, in the order of their file names:
-- these helpers; the key read once (10), the slicing (15), a key's
-- creation (20); give-backs (30), fair tails (40), reservations (50) and
-- waits (60) as functions of plain values; then the core (90): version,
-- slice, claim, grant, record, which calls them. Read the core first.
if redis.replicate_commands then redis.replicate_commands() end

-- Past this many hosts in a key the release may be given out ahead
-- (reservations, 50), the fair tails owe by time rather than with the
-- burst (40), and a used-up key is asked again only once some host gave
-- quota back (60): a thousand hosts each asking on their own cadence cost
-- more round trips than the release has permits.
local MANY_HOSTS = 100

-- A census record: accounted asked granted claimed offset_us demand, then
-- the fields `record` (90) writes after them.
local function fields(rec)
  local f = {}
  for v in string.gmatch(rec, '%-?%d+') do f[#f + 1] = tonumber(v) end
  return f
end

-- The slice key's own fields; every other field is a host's record.
local function is_host(field)
  return field ~= 'left' and field ~= 'quota' and field ~= 'demand' and field ~= 'fair'
    and field ~= 'back'
end
