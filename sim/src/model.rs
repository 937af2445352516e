//! A model of the Redis the pull script talks to: strings and hashes with
//! millisecond expiry, on the simulated clock, and the commands
//! pull script calls (a command it does not know is an error, so a new call
//! in the script shows here first).

use std::collections::HashMap;

/// A value as Redis keeps it.
enum Value {
    Str(String),
    Hash(HashMap<String, String>),
    /// A sorted set: member → score.
    ZSet(HashMap<String, f64>),
}

struct Entry {
    value: Value,
    /// µs on the simulated clock; `None`: no TTL.
    expires_us: Option<i64>,
}

/// A command's reply, in the shapes Redis answers Lua with.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Int(i64),
    /// A bulk string, or nil (Lua `false`).
    Bulk(Option<String>),
    /// An array of bulk strings (nil elements are Lua `false`).
    Array(Vec<Option<String>>),
    /// A status reply ("OK"): Lua `{ok = "OK"}`.
    Status(&'static str),
    /// A scan's reply: the next cursor and a page of fields and values.
    Scan(String, Vec<String>),
}

/// The keyspace and its clock.
#[derive(Default)]
pub struct Model {
    keys: HashMap<String, Entry>,
    now_us: i64,
    /// Commands run (`redis.call`s), for the report.
    pub commands: u64,
    /// Every hash a hash table, as Redis keeps one past its compact
    /// (listpack) limits: HSCAN pages it (tests compare both reads).
    pub hash_tables: bool,
}

/// Redis' default compact-hash limits (`hash-max-listpack-entries`,
/// `hash-max-listpack-value`): a hash within both is kept as a listpack,
/// which HSCAN answers whole whatever its COUNT.
const COMPACT_FIELDS: usize = 128;
const COMPACT_BYTES: usize = 64;

fn int(arg: &str) -> Result<i64, String> {
    arg.parse()
        .map_err(|_| "ERR value is not an integer or out of range".to_string())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Model {
    pub fn set_now_us(&mut self, us: i64) {
        self.now_us = us;
    }

    pub fn now_us(&self) -> i64 {
        self.now_us
    }

    /// A restart that kept nothing (no persistence): every key gone.
    pub fn flush(&mut self) {
        self.keys.clear();
    }

    /// Keys alive now (expired ones are dropped first).
    pub fn len(&mut self) -> usize {
        let now = self.now_us;
        self.keys
            .retain(|_, e| e.expires_us.is_none_or(|at| at > now));
        self.keys.len()
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// The live entry at `key` (an expired one is removed).
    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now_us;
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_us.is_some_and(|at| at <= now))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    fn hash(&mut self, key: &str) -> Result<Option<&mut HashMap<String, String>>, String> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// The sorted set at `key`, made if `create` and absent.
    fn zset(
        &mut self,
        key: &str,
        create: bool,
    ) -> Result<Option<&mut HashMap<String, f64>>, String> {
        if create && self.live(key).is_none() {
            let value = Value::ZSet(HashMap::new());
            let entry = Entry {
                value,
                expires_us: None,
            };
            self.keys.insert(key.to_string(), entry);
        }
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::ZSet(z),
                ..
            }) => Ok(Some(z)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// Fields of every live hash whose name starts with `prefix`.
    pub fn hash_fields(&mut self, prefix: &str) -> usize {
        let now = self.now_us;
        self.keys
            .iter()
            .filter(|(k, e)| k.starts_with(prefix) && e.expires_us.is_none_or(|at| at > now))
            .map(|(_, e)| match &e.value {
                Value::Hash(h) => h.len(),
                _ => 0,
            })
            .sum()
    }

    /// Runs one command, `args[0]` its name.
    pub fn call(&mut self, args: &[String]) -> Result<Reply, String> {
        self.commands += 1;
        let name = args
            .first()
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        let arity = |n: usize, even: bool| {
            if args.len() < n || (even && !(args.len() - n).is_multiple_of(2)) {
                Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            } else {
                Ok(())
            }
        };
        match name.as_str() {
            "TIME" => Ok(Reply::Array(vec![
                Some((self.now_us / 1_000_000).to_string()),
                Some((self.now_us % 1_000_000).to_string()),
            ])),
            "GET" => {
                arity(2, false)?;
                match self.live(&args[1]) {
                    None => Ok(Reply::Bulk(None)),
                    Some(Entry {
                        value: Value::Str(s),
                        ..
                    }) => Ok(Reply::Bulk(Some(s.clone()))),
                    Some(_) => Err(WRONGTYPE.into()),
                }
            }
            "SET" => {
                arity(3, false)?;
                let expires_us = match args.get(3).map(|s| s.to_ascii_uppercase()).as_deref() {
                    None => None,
                    Some("PX") if args.len() == 5 => Some(self.now_us + int(&args[4])? * 1000),
                    _ => {
                        return Err(
                            "ERR syntax error (the model knows SET key value [PX ms])".into()
                        );
                    }
                };
                let value = Value::Str(args[2].clone());
                self.keys
                    .insert(args[1].clone(), Entry { value, expires_us });
                Ok(Reply::Status("OK"))
            }
            "HGET" => {
                arity(3, false)?;
                Ok(Reply::Bulk(
                    self.hash(&args[1])?.and_then(|h| h.get(&args[2]).cloned()),
                ))
            }
            "HMGET" => {
                arity(3, false)?;
                let h = self.hash(&args[1])?;
                let h = h.as_deref();
                Ok(Reply::Array(
                    args[2..]
                        .iter()
                        .map(|f| h.and_then(|h| h.get(f).cloned()))
                        .collect(),
                ))
            }
            "HSET" => {
                arity(4, true)?;
                if self.hash(&args[1])?.is_none() {
                    let value = Value::Hash(HashMap::new());
                    self.keys.insert(
                        args[1].clone(),
                        Entry {
                            value,
                            expires_us: None,
                        },
                    );
                }
                let h = self.hash(&args[1])?.expect("just created");
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += h.insert(pair[0].clone(), pair[1].clone()).is_none() as i64;
                }
                Ok(Reply::Int(added))
            }
            "HGETALL" => {
                arity(2, false)?;
                let h = self.hash(&args[1])?;
                Ok(Reply::Array(
                    h.into_iter()
                        .flat_map(|h| h.iter())
                        .flat_map(|(f, v)| [Some(f.clone()), Some(v.clone())])
                        .collect(),
                ))
            }
            "HSCAN" => {
                // `HSCAN key 0 COUNT n`, a first call only (the script
                // reads a hash whole or not at all): a compact hash whole
                // (cursor 0), as Redis answers a listpack; a hash table
                // as scanned, at most n fields whole, a larger one n of
                // them and a cursor to go on from. (A hash Redis converted
                // stays a table when it shrinks; slice keys only grow.)
                arity(5, false)?;
                if args[2] != "0" || !args[3].eq_ignore_ascii_case("COUNT") {
                    return Err("ERR the model knows HSCAN key 0 COUNT n".into());
                }
                let tables = self.hash_tables;
                let mut count = int(&args[4])?.max(1) as usize;
                let h = self.hash(&args[1])?;
                if let Some(h) = &h
                    && !tables
                    && h.len() <= COMPACT_FIELDS
                    && h.iter()
                        .all(|(f, v)| f.len() <= COMPACT_BYTES && v.len() <= COMPACT_BYTES)
                {
                    count = COMPACT_FIELDS;
                }
                let len = h.as_ref().map_or(0, |h| h.len());
                let page = h
                    .into_iter()
                    .flat_map(|h| h.iter())
                    .take(count)
                    .flat_map(|(f, v)| [f.clone(), v.clone()])
                    .collect();
                let cursor = if len <= count { "0" } else { "1" };
                Ok(Reply::Scan(cursor.into(), page))
            }
            "HLEN" => {
                arity(2, false)?;
                Ok(Reply::Int(
                    self.hash(&args[1])?.map_or(0, |h| h.len()) as i64
                ))
            }
            "HINCRBY" => {
                arity(4, false)?;
                let by = int(&args[3])?;
                if self.hash(&args[1])?.is_none() {
                    let value = Value::Hash(HashMap::new());
                    let entry = Entry {
                        value,
                        expires_us: None,
                    };
                    self.keys.insert(args[1].clone(), entry);
                }
                let h = self.hash(&args[1])?.expect("just created");
                let old = match h.get(&args[2]) {
                    Some(v) => {
                        int(v).map_err(|_| "ERR hash value is not an integer".to_string())?
                    }
                    None => 0,
                };
                h.insert(args[2].clone(), (old + by).to_string());
                Ok(Reply::Int(old + by))
            }
            "ZADD" => {
                arity(4, true)?;
                let z = self.zset(&args[1], true)?.expect("just created");
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    let score: f64 = pair[0]
                        .parse()
                        .map_err(|_| "ERR value is not a valid float".to_string())?;
                    added += z.insert(pair[1].clone(), score).is_none() as i64;
                }
                Ok(Reply::Int(added))
            }
            "ZREMRANGEBYSCORE" => {
                arity(4, false)?;
                let bound = |s: &str| -> Result<f64, String> {
                    match s {
                        "-inf" => Ok(f64::NEG_INFINITY),
                        "+inf" => Ok(f64::INFINITY),
                        s => s
                            .parse()
                            .map_err(|_| "ERR min or max is not a float".into()),
                    }
                };
                let (lo, hi) = (bound(&args[2])?, bound(&args[3])?);
                let Some(z) = self.zset(&args[1], false)? else {
                    return Ok(Reply::Int(0));
                };
                let before = z.len();
                z.retain(|_, s| *s < lo || *s > hi);
                Ok(Reply::Int((before - z.len()) as i64))
            }
            "ZREMRANGEBYRANK" | "ZREVRANGE" => {
                arity(4, false)?;
                let (start, stop) = (int(&args[2])?, int(&args[3])?);
                let remove = args[0].eq_ignore_ascii_case("ZREMRANGEBYRANK");
                let Some(z) = self.zset(&args[1], false)? else {
                    return Ok(if remove {
                        Reply::Int(0)
                    } else {
                        Reply::Array(Vec::new())
                    });
                };
                // Redis' order: by score, then member; ZREVRANGE reverses it.
                let mut order: Vec<(String, f64)> =
                    z.iter().map(|(m, s)| (m.clone(), *s)).collect();
                order.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
                if !remove {
                    order.reverse();
                }
                let n = order.len() as i64;
                let at = |i: i64| if i < 0 { (n + i).max(0) } else { i };
                let (from, to) = (at(start), at(stop).min(n - 1));
                let picked: Vec<String> = if from > to {
                    Vec::new()
                } else {
                    order[from as usize..=to as usize]
                        .iter()
                        .map(|(m, _)| m.clone())
                        .collect()
                };
                if remove {
                    for m in &picked {
                        z.remove(m);
                    }
                    Ok(Reply::Int(picked.len() as i64))
                } else {
                    Ok(Reply::Array(picked.into_iter().map(Some).collect()))
                }
            }
            "ZCARD" => {
                arity(2, false)?;
                Ok(Reply::Int(
                    self.zset(&args[1], false)?.map_or(0, |z| z.len()) as i64,
                ))
            }
            "PEXPIREAT" => {
                arity(3, false)?;
                let at = int(&args[2])? * 1000;
                Ok(Reply::Int(match self.live(&args[1]) {
                    Some(e) => {
                        e.expires_us = Some(at);
                        1
                    }
                    None => 0,
                }))
            }
            "PEXPIRE" => {
                arity(3, false)?;
                let ms = int(&args[2])?;
                let at = self.now_us + ms * 1000;
                Ok(Reply::Int(match self.live(&args[1]) {
                    Some(e) => {
                        e.expires_us = Some(at);
                        1
                    }
                    None => 0,
                }))
            }
            _ => Err(format!(
                "ERR unknown command '{name}' (the model of Redis lacks it)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(m: &mut Model, args: &[&str]) -> Result<Reply, String> {
        m.call(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn keys_expire_on_the_simulated_clock() {
        let mut m = Model::default();
        m.set_now_us(1_000_000);
        assert_eq!(
            call(&mut m, &["SET", "s", "500", "PX", "10"]),
            Ok(Reply::Status("OK"))
        );
        assert_eq!(
            call(&mut m, &["HSET", "h", "a", "1", "b", "2"]),
            Ok(Reply::Int(2))
        );
        assert_eq!(call(&mut m, &["PEXPIRE", "h", "20"]), Ok(Reply::Int(1)));
        assert_eq!(
            call(&mut m, &["HMGET", "h", "a", "x"]),
            Ok(Reply::Array(vec![Some("1".into()), None]))
        );
        m.set_now_us(1_010_000);
        assert_eq!(call(&mut m, &["GET", "s"]), Ok(Reply::Bulk(None)));
        assert_eq!(call(&mut m, &["HLEN", "h"]), Ok(Reply::Int(2)));
        m.set_now_us(1_020_000);
        assert_eq!(call(&mut m, &["HGET", "h", "a"]), Ok(Reply::Bulk(None)));
        assert!(call(&mut m, &["HSET", "h", "a"]).is_err());
        assert!(
            call(&mut m, &["INCR", "h"]).is_err(),
            "unknown commands are errors"
        );
    }
}
