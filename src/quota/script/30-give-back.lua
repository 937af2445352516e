-- Give-backs. An idle host moves quota it will not spend into `given` (of
-- its claim: the claim it holds is the rest), and tells the key at its next
-- pull; the key puts back, once, what it was not told of. The host's record
-- keeps what the key was told (its 12th field).

-- What the host gave back (`sent`, ARGV 20: an older host sends nothing,
-- 0), and what the key was told before (`told`, nil when the record was
-- last written by a script that knows no give-backs: a process of an older
-- build on this host's table, which may have charged the give-back again,
-- or only part of it, since its charge stops at an empty key). Such a
-- give-back counts as told: never put back twice, lost at worst; nor is
-- what the key charges beyond the host's hold handed back as a lost grant
-- then (`told_before`: part of it may be that give-back).
local function gave_back(claimed, sent, told)
  local given = math.min(math.max(tonumber(sent) or 0, 0), math.max(claimed, 0))
  local told_before = told == nil and given > 0
  if told == nil then told = given end
  return given, told, told_before
end

-- A give-back the key was not told of goes back into the key: never more
-- than the key charges beyond what the host holds (a key created anew never
-- charged it). The fair tails still count it as granted to the host: it had
-- its turn, and a host gone idle owed it again would keep it from the
-- others (docs/design/quota.md). Returns left, the host's charge, what the
-- key was told, and what was put back.
local function put_back(given, told, charged, holds, left, quota)
  if not (given > told) then return left, charged, told, 0 end
  local back = math.min(given - told, math.max(charged - holds, 0))
  return math.min(left + back, quota), charged - back, given, back
end
