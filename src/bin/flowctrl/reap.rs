//! `reap`: attaches to a table as `set` does (the attach sweeps the dead),
//! and says which dead processes are gone and the permits they held.

use std::path::Path;

use flowctrl::View;

use crate::Result;
use crate::set::attach;

/// `flowctrl reap`: attaches (which sweeps the dead), reaps, and reports the
/// dead processes that are gone afterwards and the permits they held.
pub(crate) fn reap(path: &Path) -> Result {
    let view = View::open(path)?.snapshot()?;
    let dead: Vec<_> = view
        .processes()
        .into_iter()
        .filter(|p| p.alive == Some(false))
        .collect();
    let mut held = Vec::new();
    for task in view.tasks() {
        for share in view.processes_of(&task.name)? {
            if share.stats.in_flight > 0 && dead.iter().any(|d| d.slot == share.slot) {
                held.push((share.slot, task.name.clone(), share.stats.in_flight));
            }
        }
    }
    let table = attach(path)?;
    table.reap();
    drop(table);
    let after = View::open(path)?.processes()?;
    let reaped: Vec<_> = dead
        .iter()
        .filter(|d| {
            !after
                .iter()
                .any(|a| a.slot == d.slot && a.pid == d.pid && a.alive == Some(false))
        })
        .collect();
    if reaped.is_empty() {
        crate::text::line(format_args!("no dead processes to reap"));
    }
    for p in reaped {
        let gave: Vec<String> = held
            .iter()
            .filter(|(slot, _, _)| *slot == p.slot)
            .map(|(_, task, n)| format!("{n} permits of {task:?}"))
            .collect();
        let gave = if gave.is_empty() {
            "held no permits".to_string()
        } else {
            format!("gave back {}", gave.join(", "))
        };
        crate::text::line(format_args!(
            "reaped slot {} (pid {}): {gave}",
            p.slot, p.pid
        ));
    }
    Ok(())
}
