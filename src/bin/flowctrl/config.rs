//! `flowctrl config check FILE`: checks a config file as a table's open
//! would, and says what applying it would change on its table (`--table`
//! wins over the one the file names), task by task and field by field.
//! Reads the table through a view.

use std::path::{Path, PathBuf};

use flowctrl::{ConfigFile, TableOptions, TaskConfig, TaskSettings, View};

use crate::Result;

/// The fields `file` sets that differ from `s`, as "field old -> new".
fn changes(file: &TaskConfig, s: &TaskSettings) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, asked: Option<String>, now: String| {
        if let Some(asked) = asked.filter(|a| *a != now) {
            out.push(format!("{name} {now} -> {asked}"));
        }
    };
    let (l, g, a) = (&file.local, &file.global, &file.limiter);
    field(
        "local_rate",
        l.local_rate.map(|v| v.to_string()),
        s.local.local_rate.to_string(),
    );
    field(
        "burst",
        l.burst.map(|v| v.to_string()),
        s.local.burst.to_string(),
    );
    // No cap reads "none", asked (NO_CAP) or in force (0).
    let cap = |v: u32| {
        if v == 0 || v == flowctrl::NO_CAP {
            "none".to_string()
        } else {
            v.to_string()
        }
    };
    field(
        "max_concurrency",
        l.max_concurrency.map(cap),
        cap(s.local.max_concurrency),
    );
    field(
        "global_rate",
        g.global_rate.map(|v| v.to_string()),
        s.global.global_rate.to_string(),
    );
    field(
        "slice_ms",
        g.slice_ms.map(|v| v.to_string()),
        s.global.slice_ms.to_string(),
    );
    field(
        "chunk",
        g.chunk.map(|v| v.to_string()),
        s.global.chunk.to_string(),
    );
    field(
        "fallback",
        g.fallback.map(|v| v.to_string()),
        s.global.fallback.to_string(),
    );
    field(
        "global_burst",
        g.global_burst.map(|v| v.to_string()),
        s.global.global_burst.to_string(),
    );
    field(
        "shards",
        g.shards.map(|v| v.to_string()),
        s.global.shards.to_string(),
    );
    field(
        "limiter",
        a.spec.map(|v| v.canonical()),
        s.limiter.canonical(),
    );
    field(
        "min_limit",
        a.min_limit.map(|v| v.to_string()),
        s.limiter.min.to_string(),
    );
    field(
        "max_limit",
        a.max_limit.map(|v| v.to_string()),
        s.limiter.max.to_string(),
    );
    field(
        "initial_limit",
        a.initial_limit.map(|v| v.to_string()),
        s.limiter.initial.to_string(),
    );
    out
}

/// Checks `file` and compares it with a table: `given` (`--table` or
/// FLOWCTRL_TABLE), which wins over the file's `[table] path` as it wins
/// over FLOWCTRL_CONFIG's for every command; else the file's path; else
/// `otherwise` (FLOWCTRL_CONFIG's, or the default).
pub(crate) fn check(
    file: &Path,
    given: Option<&Path>,
    otherwise: impl FnOnce() -> Result<PathBuf>,
) -> Result {
    let config = ConfigFile::load(file)?;
    // The checks a table's open runs on `[table]`, and `flowctrl manage`'s
    // on a file with anything of the manager's: the same functions.
    TableOptions::from_config(&config)?;
    let manager = if config.has_manager() {
        let m = flowctrl::manage::ManagerConfig::from_file(&config)?;
        format!(", {} managed task(s)", m.tasks.len())
    } else {
        String::new()
    };
    crate::text::line(format_args!(
        "{}: ok ({} task(s), {} balancer(s){manager})",
        file.display(),
        config.tasks.len(),
        config.balancers.len()
    ));
    let table = match (given, config.table.path.as_deref()) {
        (Some(given), Some(named)) => {
            if given != named {
                crate::text::line(format_args!(
                    "table {}: --table's (or FLOWCTRL_TABLE's), over the file's [table] path {}",
                    given.display(),
                    named.display()
                ));
            }
            given.to_path_buf()
        }
        (Some(given), None) => given.to_path_buf(),
        (None, Some(named)) => named.to_path_buf(),
        (None, None) => otherwise()?,
    };
    let table = table.as_path();
    let view = match View::open(table) {
        Ok(view) => view,
        Err(e) if e.kind() == flowctrl::ErrorKind::Io && !table.exists() => {
            crate::text::line(format_args!(
                "table {}: not created yet; nothing to change",
                table.display()
            ));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // One pass over the table, not one per task of the file.
    let registered: std::collections::BTreeMap<String, flowctrl::TaskSnapshot> = view
        .tasks()?
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    for (name, fields) in &config.tasks {
        match registered.get(name).ok_or(()) {
            Ok(t) => {
                let list = changes(fields, &t.settings);
                if list.is_empty() {
                    crate::text::line(format_args!("task {name:?}: unchanged"));
                } else {
                    crate::text::line(format_args!("task {name:?}: {}", list.join(", ")));
                }
                if t.settings.global_source == flowctrl::GlobalSource::Store {
                    crate::text::line(format_args!(
                        "  (its global fields come from the store's record, which wins over the file)"
                    ));
                }
            }
            Err(_) => crate::text::line(format_args!(
                "task {name:?}: not registered yet; registrations will take the file's fields"
            )),
        }
    }
    Ok(())
}
