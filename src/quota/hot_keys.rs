//! The fleet's hot keys of a keyed task: the keys the store gave most of
//! in its current slice (see `keyed.lua`: only keys some host pulled are
//! there), with the names hosts sent of their most asked keys. Bounded to
//! the top few whatever the keys, for `flowctrl fleet` and the manager's
//! metrics.

use super::census::Store;
use super::keys::manager_key;
use crate::error::{Error, ErrorKind, Result};

/// The most a reader asks for: the store sorts no more per call.
pub const MAX_HOT_KEYS: usize = 100;

/// A key the store gave chunks of in a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    /// The key's id in the store (a hash of the task and the key).
    pub id: u64,
    /// Its first bytes (at most 64), if a host named it.
    pub name: Option<Vec<u8>>,
    /// What the slice gave of it so far, fleet-wide: chunks granted and
    /// hosts' own admissions charged.
    pub given: u64,
    /// Asks hosts made of it in the slice.
    pub asks: u64,
}

/// A keyed task's hot keys in the store's current slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HotKeys {
    pub slice_ms: u32,
    pub slice: u64,
    /// Keys the store counts in the slice (those some host pulled).
    pub keys: u64,
    /// The most given, most first.
    pub top: Vec<HotKey>,
}

/// KEYS: 1 the task's key counts. ARGV: 1 slice_ms, 2 how many. Answers
/// the store's current slice, the keys counted in it, then id, given, asks
/// and name ("" for none) of the most given, most first; fields that are
/// not a key's id and count (written by hand) are skipped.
const TOP: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = math.floor(now / tonumber(ARGV[1]))
local n = tonumber(ARGV[2])
local counts = redis.call('HGETALL', KEYS[1] .. ':' .. current)
local ASK = 4294967296
local top = {}
for i = 1, #counts, 2 do
  local v = tonumber(counts[i + 1])
  local id = counts[i]
  if v and v >= 0 and v < 2 ^ 53 and v == math.floor(v)
    and #id == 16 and not string.find(id, '[^0-9a-f]') then
    local e = {counts[i], v % ASK, math.floor(v / ASK)}
    local at = #top + 1
    while at > 1 and top[at - 1][2] < e[2] do at = at - 1 end
    if at <= n then
      table.insert(top, at, e)
      if #top > n then table.remove(top) end
    end
  end
end
local out = {tostring(current), tostring(#counts / 2)}
for _, e in ipairs(top) do
  local name = redis.call('HGET', KEYS[1] .. ':n:' .. current, e[1]) or ''
  for _, v in ipairs({e[1], string.format('%d', e[2]), string.format('%d', e[3]), name}) do
    out[#out + 1] = v
  end
end
return out
"#;

impl Store {
    /// The `top` keys (at most [`MAX_HOT_KEYS`]) of keyed task `task` the
    /// store gave most of in its current slice of `slice_ms` (the slices of
    /// the keys' global rate: keys of another slice are counted apart).
    /// One round trip.
    pub fn hot_keys(&self, task: &str, slice_ms: u32, top: usize) -> Result<HotKeys> {
        crate::words::validate_name(task, "task name")?;
        if !(10..=86_400_000).contains(&slice_ms) || top > MAX_HOT_KEYS {
            return Err(Error::invalid(format!(
                "hot keys: slice_ms is 10 to 86400000 and top at most {MAX_HOT_KEYS}"
            )));
        }
        let script = redis::Script::new(TOP);
        let key = manager_key(self.redis.prefix(), task, 0, 1, "k");
        let reply: Vec<Vec<u8>> = self.redis.round_trip("read the hot keys", |conn| {
            script.key(&key).arg(slice_ms).arg(top).invoke(conn)
        })?;
        parse(&reply, slice_ms, top)
    }
}

/// The script's answer, checked as strictly as any value from the store.
fn parse(reply: &[Vec<u8>], slice_ms: u32, top: usize) -> Result<HotKeys> {
    let bad = || {
        Error::new(
            ErrorKind::Store,
            "the store answered the hot keys with values out of their range",
        )
    };
    let number = |v: &[u8]| -> Result<u64> {
        std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    };
    let [slice, keys, rest @ ..] = reply else {
        return Err(bad());
    };
    if !rest.len().is_multiple_of(4) || rest.len() / 4 > top {
        return Err(bad());
    }
    let top = rest
        .chunks(4)
        .map(|e| {
            let id = std::str::from_utf8(&e[0])
                .ok()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(bad)?;
            Ok(HotKey {
                id,
                name: (!e[3].is_empty()).then(|| e[3][..e[3].len().min(64)].to_vec()),
                given: number(&e[1])?,
                asks: number(&e[2])?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(HotKeys {
        slice_ms,
        slice: number(slice)?,
        keys: number(keys)?,
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_reply_is_read_only_when_every_value_is_in_range() {
        let ok = parse(
            &reply(&["9", "3", "00000000000000ab", "12", "4", "acme"]),
            1000,
            10,
        );
        assert_eq!(
            ok.unwrap().top,
            [HotKey {
                id: 0xab,
                name: Some(b"acme".to_vec()),
                given: 12,
                asks: 4
            }]
        );
        for hostile in [
            &["9"][..],
            &["9", "3", "ab", "12", "4"][..],
            &["9", "3", "zz", "12", "4", ""][..],
            &["9", "3", "ab", "-1", "4", ""][..],
            &["x", "3"][..],
        ] {
            assert!(parse(&reply(hostile), 1000, 10).is_err(), "{hostile:?}");
        }
        let two = ["9", "3", "a", "1", "1", "", "b", "1", "1", ""];
        assert!(parse(&reply(&two), 1000, 1).is_err(), "more than asked for");
    }
}
