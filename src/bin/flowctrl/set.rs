//! `set`, a command that changes a table (with `reap`): it attaches to it as
//! a service does (an attachment slot for as long as it runs), and only to
//! a table that exists and has the task named. A view reads the table
//! before and after, to say what changed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use flowctrl::{Fallback, LimiterSpec, Table, TableOptions, TaskConfig, TaskSettings, View};

use crate::set_keys::KeyEdits;
use crate::{Result, invalid, usage, usage_of};

/// The fields `set` takes, in the order they are reported.
const KEYS: [&str; 14] = [
    "local_rate",
    "burst",
    "max_concurrency",
    "global_rate",
    "slice_ms",
    "chunk",
    "fallback",
    "global_burst",
    "shards",
    "limiter",
    "min_limit",
    "max_limit",
    "initial_limit",
    "shadow",
];

/// `flowctrl set TASK KEY=VALUE...`: one update of the task for the whole
/// host ([`flowctrl::Task::update`]), checked whole before anything is
/// written; every word is parsed first, so a usage error changes nothing.
/// With `dry_run`, what would change is read through a view and checked as
/// the update would check it, and nothing is written.
pub(crate) fn run(path: &Path, name: &str, fields: &[String], dry_run: bool) -> Result {
    let (key_fields, fields): (Vec<String>, Vec<String>) =
        fields.iter().cloned().partition(|f| f.starts_with("key_"));
    let config = parse(&fields)?;
    let keys = KeyEdits::parse(&key_fields)?;
    if dry_run {
        return preview(path, name, &fields, &config, &keys);
    }
    // Checked whole before anything is written: the task exists, and the
    // fields and the key edits are what an update would take.
    let view = View::open(path)?.snapshot()?;
    let before = view.task(name)?.settings;
    if !fields.is_empty() {
        config.preview(&before)?;
    }
    if !keys.is_empty() {
        crate::set_keys::check(&view, name, &keys)?;
    }
    drop(view);
    if !key_fields.is_empty() {
        crate::set_keys::set(path, name, &keys)?;
        if fields.is_empty() {
            return Ok(());
        }
    }
    let table = attach(path)?;
    table.task(name, &TaskConfig::new())?.update(&config)?;
    drop(table);
    let after = View::open(path)?.task(name)?.settings;
    crate::text::line(format_args!(
        "task {name:?}: {}",
        changes(&fields, &before, &after).join(", ")
    ));
    if touches_global(&fields) && after.global_source == flowctrl::GlobalSource::Store {
        crate::text::line(format_args!(
            "the store's record of {name:?} is in force: this host's own global numbers \
             changed, and apply when the record is removed"
        ));
    }
    Ok(())
}

/// "key old -> new" for each field given, in [`KEYS`]' order.
fn changes(fields: &[String], before: &TaskSettings, after: &TaskSettings) -> Vec<String> {
    let (old, new) = (values(before), values(after));
    KEYS.iter()
        .enumerate()
        .filter(|(_, key)| fields.iter().any(|f| f.split('=').next() == Some(**key)))
        .map(|(i, key)| format!("{key} {} -> {}", old[i], new[i]))
        .collect()
}

fn touches_global(fields: &[String]) -> bool {
    fields.iter().any(|f| {
        let key = f.split('=').next().unwrap_or("");
        KEYS[3..9].contains(&key)
    })
}

/// `set --dry-run`: the changes, read through a view (no attachment, no
/// reaping) and checked; nothing written.
fn preview(
    path: &Path,
    name: &str,
    fields: &[String],
    config: &TaskConfig,
    keys: &KeyEdits,
) -> Result {
    let view = View::open(path)?.snapshot()?;
    let before = view.task(name)?.settings;
    if !fields.is_empty() {
        let after = config.preview(&before)?;
        crate::text::line(format_args!(
            "task {name:?}: {} (dry run: nothing changed)",
            changes(fields, &before, &after).join(", ")
        ));
    }
    if !keys.is_empty() {
        crate::set_keys::preview(&view, name, keys)?;
    }
    Ok(())
}

pub(crate) fn cap(n: u32) -> String {
    if n == 0 { "none".into() } else { n.to_string() }
}

/// The normal attached open of an existing table, trusting its owner: the
/// operator named it (a service trusts only its own uid's tables).
pub(crate) fn attach(path: &Path) -> Result<Table> {
    let view = View::open(path)?;
    let owner = std::fs::metadata(view.path())
        .map_err(|e| invalid(format!("cannot stat {}: {e}", view.path().display())))?
        .uid();
    let options = TableOptions {
        owner: Some(owner),
        shared: true,
        ..TableOptions::default()
    };
    let table = Table::open(view.path(), &options)?;
    // A config file (FLOWCTRL_CONFIG) names the table an open takes: it
    // must be the one read.
    if table.path() != view.path() {
        return Err(invalid(format!(
            "FLOWCTRL_CONFIG names table {}, not {}: pass --table {0}, or unset it",
            table.path().display(),
            view.path().display()
        )));
    }
    Ok(table)
}

/// `KEY=VALUE` words into one configuration; a key given twice, an unknown
/// key or a value that does not parse is refused with the word named.
fn parse(fields: &[String]) -> Result<TaskConfig> {
    let mut config = TaskConfig::new();
    let mut seen: Vec<&str> = Vec::new();
    for field in fields {
        let Some((key, value)) = field.split_once('=') else {
            return Err(usage(format!(
                "{field:?} is not KEY=VALUE (keys: {})",
                KEYS.join(", ")
            )));
        };
        if seen.contains(&key) {
            return Err(usage(format!("{key} is given twice")));
        }
        seen.push(key);
        config = apply(config, key, value.trim())?;
    }
    Ok(config)
}

fn apply(c: TaskConfig, key: &str, value: &str) -> Result<TaskConfig> {
    Ok(match key {
        "local_rate" => c.local_rate(number(key, value)?),
        "burst" => c.burst(count(key, value)?),
        "max_concurrency" => c.max_concurrency(flowctrl::parse_cap(key, value).map_err(usage_of)?),
        "global_rate" => c.global_rate(number(key, value)?),
        "slice_ms" => c.slice_ms(count(key, value)?),
        "chunk" => c.chunk(count(key, value)?),
        "fallback" => c.fallback(Fallback::parse(value).map_err(usage_of)?),
        "global_burst" => c.global_burst(count(key, value)?),
        "shards" => c.shards(count(key, value)?),
        "limiter" => c.limiter(LimiterSpec::parse(value).map_err(usage_of)?),
        "min_limit" => c.min_limit(count(key, value)?),
        "max_limit" => c.max_limit(count(key, value)?),
        "initial_limit" => c.initial_limit(count(key, value)?),
        "shadow" => c.shadow(
            value
                .parse()
                .map_err(|_| usage(format!("{key}={value:?} is not true or false")))?,
        ),
        _ => {
            return Err(usage(format!(
                "unknown key {key:?}; the keys are {}",
                KEYS.join(", ")
            )));
        }
    })
}

fn number(key: &str, value: &str) -> Result<f64> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(usage(format!("{key}={value:?} is not a number"))),
    }
}

pub(crate) fn count(key: &str, value: &str) -> Result<u32> {
    value.parse::<u32>().map_err(|_| {
        usage(format!(
            "{key}={value:?} is not a whole number of 0..={}",
            u32::MAX
        ))
    })
}

/// The values of [`KEYS`] in `s`, as `set` reports them.
fn values(s: &TaskSettings) -> [String; 14] {
    let (l, g, m) = (&s.local, &s.global, &s.limiter);
    [
        l.local_rate.to_string(),
        l.burst.to_string(),
        cap(l.max_concurrency),
        g.global_rate.to_string(),
        g.slice_ms.to_string(),
        g.chunk.to_string(),
        g.fallback.to_string(),
        g.global_burst.to_string(),
        g.shards.to_string(),
        m.to_string(),
        m.min.to_string(),
        m.max.to_string(),
        m.initial.to_string(),
        l.shadow.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowctrl::NO_CAP;

    fn words(text: &str) -> Vec<String> {
        text.split(',').map(str::to_string).collect()
    }

    #[test]
    fn fields_parse_and_bad_ones_are_named() {
        let c = parse(&words("local_rate=2.5,burst=7,fallback=deny,limiter=aimd")).unwrap();
        let expected = TaskConfig::new()
            .local_rate(2.5)
            .burst(7)
            .fallback(Fallback::Deny)
            .limiter(LimiterSpec::parse("aimd").unwrap());
        assert_eq!(c, expected);
        for (word, cap) in [("none", NO_CAP), ("off", NO_CAP), ("7", 7)] {
            let c = parse(&words(&format!("max_concurrency={word}"))).unwrap();
            assert_eq!(c.local.max_concurrency, Some(cap), "{word}");
        }
        for (bad, says) in [
            ("nope=1", "unknown key \"nope\""),
            ("burst", "is not KEY=VALUE"),
            ("burst=-1", "burst=\"-1\" is not a whole number"),
            ("local_rate=fast", "local_rate=\"fast\" is not a number"),
            ("local_rate=inf", "is not a number"),
            ("burst=1,burst=2", "burst is given twice"),
            ("limiter=bbr", "unknown limiter"),
            ("max_concurrency=0", "max_concurrency 0 is refused"),
            (
                "max_concurrency=-1",
                "is not a whole number of at least 1, nor none or off",
            ),
        ] {
            let err = parse(&words(bad)).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
