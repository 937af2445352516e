-- The slicing. The 13th field of the host's record: the slicing the shape
-- key held at the host's pull in this key that checked it, its TTL then set
-- to two slices and more (0: not checked, or not its own slicing). The
-- shape holds it to the slice's end: the host's later pulls in this key,
-- cut the same way, skip the check and answer as it would. A host on
-- another's slicing checks at every pull: the shape's expiry sends it back
-- at once.
--
-- Returns shaped (the 13th field), mismatch (1: the host spends by
-- another's slicing), keeps_shape (this pull renews the shape's TTL), and
-- {slicing} when the host must cut its slices so (the reply {-3,
-- slicing}; nil to go on). `by_record`: the host spends by the record's numbers
-- (no shape check).
local function check_shape(rec, shape_key, slice_ms, own, ttl, by_record)
  if by_record then return 0, 0, false, nil end
  local mark = rec and string.match(rec, '^' .. string.rep('%S+ ', 12) .. '(%d+)$')
  if slice_ms == own and mark == tostring(slice_ms) then return slice_ms, 0, false, nil end
  local shape = tonumber(redis.call('GET', shape_key))
  if shape == nil then
    if slice_ms ~= own then return 0, 0, false, {own} end
    redis.call('SET', shape_key, own, 'PX', ttl)
    return own, 0, false, nil
  elseif shape ~= slice_ms then
    return 0, 0, false, {shape}
  elseif shape == own then
    return own, 0, true, nil
  end
  return 0, 1, false, nil
end
