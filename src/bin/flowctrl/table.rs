//! `table create` and `table info`: the table file itself. `create` opens
//! the table as a service's open would (with FLOWCTRL_CONFIG's `[table]`
//! section winning, as there) and detaches at once; a table that exists is
//! left as it is and described. `info` reads the file through a view.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use flowctrl::{Table, TableOptions, View};
use serde_json::json;

use crate::{Result, invalid};

/// The geometry `create` was given; `None` keeps the default.
pub(crate) struct Geometry {
    pub capacity: Option<u32>,
    pub max_processes: Option<u32>,
    pub balancers: Option<u32>,
    pub mode: Option<u32>,
}

pub(crate) fn create(path: &Path, asked: Geometry) -> Result {
    let resolved = flowctrl::table::resolve_path(Some(path));
    if resolved.exists() {
        let view = View::open(&resolved)?;
        crate::text::line(format_args!(
            "table {} exists (left as it is): {}",
            view.path().display(),
            geometry_text(&view)
        ));
        return Ok(());
    }
    let d = TableOptions::default();
    let mode = asked.mode.unwrap_or(d.mode);
    let options = TableOptions {
        capacity: asked.capacity.unwrap_or(d.capacity),
        max_processes: asked.max_processes.unwrap_or(d.max_processes),
        balancers: asked.balancers.unwrap_or(d.balancers),
        mode,
        // Group or other write bits: a table others may write, asked for.
        shared: mode & 0o022 != 0,
        ..d
    };
    let table = Table::open(&resolved, &options)?;
    let created = table.path().to_path_buf();
    drop(table);
    let view = View::open(&created)?;
    crate::text::line(format_args!(
        "created table {}: {}",
        view.path().display(),
        geometry_text(&view)
    ));
    Ok(())
}

/// "256 task slots, 64 attachments, 16 balancers of 32 backends, mode
/// 0600, N bytes".
fn geometry_text(view: &View) -> String {
    let (size, mode) = std::fs::metadata(view.path())
        .map(|m| (m.len(), m.permissions().mode() & 0o7777))
        .unwrap_or_default();
    format!(
        "{} task slots, {} attachments, {} balancers of {} backends, mode {mode:04o}, {size} bytes",
        view.capacity(),
        view.max_processes(),
        view.balancer_capacity(),
        view.backends_per_balancer()
    )
}

pub(crate) fn info(path: &Path, json: bool) -> Result {
    let view = View::open(path)?;
    let meta = std::fs::metadata(view.path())
        .map_err(|e| invalid(format!("cannot stat {}: {e}", view.path().display())))?;
    let lanes = view.lane_pool()?;
    let layout = view.snapshot()?.layout_version();
    let mode = meta.permissions().mode() & 0o7777;
    if json {
        return crate::json::print_json(json!({
            "path": view.path().display().to_string(),
            "size": meta.len(),
            "layout_version": layout,
            "capacity": view.capacity(),
            "max_processes": view.max_processes(),
            "balancers": view.balancer_capacity(),
            "backends_per_balancer": view.backends_per_balancer(),
            "lanes": lanes.map(|(used, sets)| json!({"used": used, "sets": sets})),
            "mode": format!("{mode:04o}"),
            "owner_uid": meta.uid(),
        }));
    }
    let rows = [
        ("table", view.path().display().to_string()),
        ("size", format!("{} bytes", meta.len())),
        ("layout_version", layout.to_string()),
        ("capacity", format!("{} task slots", view.capacity())),
        ("max_processes", view.max_processes().to_string()),
        ("balancers", view.balancer_capacity().to_string()),
        (
            "backends_per_balancer",
            view.backends_per_balancer().to_string(),
        ),
        (
            "lanes",
            lanes.map_or("one set per pair".into(), |(used, sets)| {
                format!("{used} of {sets} sets in use")
            }),
        ),
        ("mode", format!("{mode:04o}")),
        ("owner_uid", meta.uid().to_string()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:width$}  {v}\n"));
    }
    crate::text::print(&out);
    Ok(())
}
