//! The pull script run as Redis runs it: the crate's own pull script
//! (`flowctrl::sim::PULL_SCRIPT`, not a copy) in a Lua 5.1 interpreter, with
//! `KEYS`, `ARGV` and a `redis` table whose `call` goes to the [`Model`],
//! converting values both ways by Redis' rules (numbers to strings for
//! arguments; integers, bulk strings, nil as `false`, status as `{ok=}` for
//! replies; a number returned by the script truncated to an integer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flowctrl::sim::ScriptValue;
use flowctrl::{Error, ErrorKind, Result};
use mlua::{Function, Lua, MultiValue, Value};

use crate::model::{Model, Reply};

/// The script and its store: what the simulated tables pull from.
pub struct LuaStore {
    lua: Mutex<(Lua, Function)>,
    /// The keys' global-rate script, over the same keyspace.
    keyed: Mutex<Function>,
    pub model: Arc<Mutex<Model>>,
    /// Script calls: the store's round trips.
    pub evals: AtomicU64,
    /// The replies by kind: the ask granted whole, in part, nothing with
    /// quota left in the key (held back), nothing with the key used up.
    pub kinds: [AtomicU64; 4],
    /// What the last reply said was left in the key.
    pub last_left: AtomicU64,
    /// `FLOWCTRL_SIM_TRACE=<host id>`: that host's pulls on stderr (`*`: every host's).
    trace: Option<String>,
}

fn lua_error(e: mlua::Error) -> Error {
    Error::new(ErrorKind::Store, format!("the simulated store: {e}"))
}

/// A Lua value as Redis turns a `redis.call` argument into a string.
fn arg_string(v: &Value) -> mlua::Result<String> {
    match v {
        Value::String(s) => Ok(s.to_string_lossy()),
        Value::Integer(i) => Ok(i.to_string()),
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Ok((*n as i64).to_string()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(mlua::Error::RuntimeError(format!(
            "Lua redis lib command arguments must be strings or integers, not {}",
            other.type_name()
        ))),
    }
}

fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    let bulk = |s: Option<String>| -> mlua::Result<Value> {
        Ok(match s {
            Some(s) => Value::String(lua.create_string(&s)?),
            None => Value::Boolean(false),
        })
    };
    Ok(match reply {
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(s) => bulk(s)?,
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, s) in items.into_iter().enumerate() {
                t.raw_set(i + 1, bulk(s)?)?;
            }
            Value::Table(t)
        }
        Reply::Scan(cursor, items) => {
            let page = lua.create_table()?;
            for (i, s) in items.into_iter().enumerate() {
                page.raw_set(i + 1, lua.create_string(&s)?)?;
            }
            let t = lua.create_table()?;
            t.raw_set(1, lua.create_string(&cursor)?)?;
            t.raw_set(2, page)?;
            Value::Table(t)
        }
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            Value::Table(t)
        }
    })
}

/// A value the script returned, as the integer a client reads of it.
fn reply_int(v: &Value) -> Result<i64> {
    match v {
        Value::Integer(i) => Ok(*i),
        Value::Number(n) => Ok(n.trunc() as i64),
        Value::String(s) => s.to_string_lossy().parse().map_err(|_| {
            Error::new(
                ErrorKind::Store,
                "the simulated store: a reply is not an integer",
            )
        }),
        other => Err(Error::new(
            ErrorKind::Store,
            format!(
                "the simulated store: a reply element is {}",
                other.type_name()
            ),
        )),
    }
}

/// A reply element as Redis hands a Lua value over: a number as an integer
/// (truncated), a string as a bulk string.
fn reply_value(v: &Value) -> Result<ScriptValue> {
    match v {
        Value::String(s) => Ok(ScriptValue::Text(s.to_string_lossy())),
        other => reply_int(other).map(ScriptValue::Int),
    }
}

/// Runs `function` as EVALSHA would, with these KEYS and ARGV.
fn call(lua: &Lua, function: &Function, keys: &[String], args: &[String]) -> Result<Value> {
    let run = || -> mlua::Result<Value> {
        let g = lua.globals();
        g.set(
            "KEYS",
            lua.create_sequence_from(keys.iter().map(|s| s.as_str()))?,
        )?;
        g.set(
            "ARGV",
            lua.create_sequence_from(args.iter().map(|s| s.as_str()))?,
        )?;
        function.call::<Value>(())
    };
    run().map_err(lua_error)
}

impl LuaStore {
    pub fn new() -> Result<Self> {
        Self::over(
            Arc::new(Mutex::new(Model::default())),
            flowctrl::sim::PULL_SCRIPT,
        )
    }

    /// A store over this one's keyspace that runs `script` instead: a host
    /// of another release sharing the keys.
    pub fn sharing(&self, script: &str) -> Result<Self> {
        Self::over(self.model.clone(), script)
    }

    fn over(model: Arc<Mutex<Model>>, script: &str) -> Result<Self> {
        let lua = Lua::new();
        let setup = || -> mlua::Result<Function> {
            let redis = lua.create_table()?;
            let m = model.clone();
            let call = lua.create_function(move |lua, args: MultiValue| {
                let args = args
                    .iter()
                    .map(arg_string)
                    .collect::<mlua::Result<Vec<_>>>()?;
                let reply = m.lock().unwrap().call(&args);
                match reply {
                    Ok(reply) => to_lua(lua, reply),
                    Err(e) => Err(mlua::Error::RuntimeError(e)),
                }
            })?;
            redis.set("call", call)?;
            redis.set(
                "error_reply",
                lua.create_function(|lua, msg: String| {
                    let t = lua.create_table()?;
                    t.raw_set("err", msg)?;
                    Ok(t)
                })?,
            )?;
            lua.globals().set("redis", redis)?;
            lua.load(script).set_name("pull script").into_function()
        };
        let function = setup().map_err(lua_error)?;
        let keyed = lua
            .load(flowctrl::sim::KEYED_SCRIPT)
            .set_name("keyed.lua")
            .into_function()
            .map_err(lua_error)?;
        Ok(Self {
            lua: Mutex::new((lua, function)),
            keyed: Mutex::new(keyed),
            model,
            evals: AtomicU64::new(0),
            kinds: Default::default(),
            last_left: AtomicU64::new(0),
            trace: std::env::var("FLOWCTRL_SIM_TRACE").ok(),
        })
    }
}

impl flowctrl::sim::Script for LuaStore {
    fn hash(&self, key: &str) -> Result<Vec<(String, String)>> {
        // A round trip of its own (a host reading a record).
        self.evals.fetch_add(1, Ordering::Relaxed);
        let reply = self
            .model
            .lock()
            .unwrap()
            .call(&["HGETALL".to_string(), key.to_string()])
            .map_err(|e| Error::new(ErrorKind::Store, format!("the simulated store: {e}")))?;
        let Reply::Array(items) = reply else {
            return Ok(Vec::new());
        };
        let text: Vec<String> = items.into_iter().flatten().collect();
        Ok(text
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect())
    }

    fn eval_keyed(&self, keys: &[String], args: &[String]) -> Result<Vec<i64>> {
        self.evals.fetch_add(1, Ordering::Relaxed);
        let guard = self.lua.lock().unwrap();
        let lua = &guard.0;
        let function = self.keyed.lock().unwrap();
        match call(lua, &function, keys, args)? {
            Value::Table(t) => t
                .sequence_values::<Value>()
                .map(|v| reply_int(&v.map_err(lua_error)?))
                .collect(),
            other => Ok(vec![reply_int(&other)?]),
        }
    }

    fn eval(&self, keys: &[String], args: &[String]) -> Result<Vec<ScriptValue>> {
        self.evals.fetch_add(1, Ordering::Relaxed);
        let guard = self.lua.lock().unwrap();
        let (lua, function) = &*guard;
        let value = call(lua, function, keys, args)?;
        let host = args.get(5).map(|s| s.as_str());
        if self
            .trace
            .as_deref()
            .is_some_and(|t| t == "*" || Some(t) == host)
        {
            let now = self.model.lock().unwrap().now_us();
            eprintln!(
                "{:>7.1} ms {} want {} claimed {} demand {} -> {:?}",
                (now % 1_000_000) as f64 / 1000.0,
                host.unwrap_or(""),
                args[1],
                args[6],
                args[13],
                match &value {
                    // The integers (a record that came with the reply
                    // shows as its version and i64::MIN per field).
                    Value::Table(t) => t
                        .sequence_values::<Value>()
                        .filter_map(|v| v.ok())
                        .map(|v| reply_int(&v).unwrap_or(i64::MIN))
                        .collect::<Vec<_>>(),
                    _ => vec![],
                }
            );
        }
        match value {
            Value::Table(t) => {
                if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                    return Err(Error::new(
                        ErrorKind::Store,
                        format!("the simulated store: {}", e.to_string_lossy()),
                    ));
                }
                let r: Vec<ScriptValue> = t
                    .sequence_values::<Value>()
                    .map(|v| reply_value(&v.map_err(lua_error)?))
                    .collect::<Result<_>>()?;
                let int = |i: usize| match r.get(i) {
                    Some(ScriptValue::Int(n)) => *n,
                    _ => -1,
                };
                if r.len() > 1 && int(0) >= 0 {
                    let want: i64 = args[1].parse().unwrap_or(0);
                    let kind = match (int(0), int(1)) {
                        (g, _) if g >= want => 0,
                        (g, _) if g > 0 => 1,
                        (_, l) if l > 0 => 2,
                        _ => 3,
                    };
                    self.kinds[kind].fetch_add(1, Ordering::Relaxed);
                    self.last_left
                        .store(int(1).max(0) as u64, Ordering::Relaxed);
                }
                Ok(r)
            }
            other => Ok(vec![reply_value(&other)?]),
        }
    }
}

/// A reply's integers, for tests that read the ten (a record that came
/// with it reads as `i64::MIN` per field).
pub fn ints(reply: Vec<ScriptValue>) -> Vec<i64> {
    reply
        .into_iter()
        .map(|v| match v {
            ScriptValue::Int(n) => n,
            ScriptValue::Text(_) => i64::MIN,
        })
        .collect()
}
