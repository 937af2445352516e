//! Live reload: every 250 ms the table handle's reaper thread (no thread of
//! its own) looks at the file's size, mtime and inode (one `stat`); on a change it reads
//! and checks the file again. A good version is applied host-wide by one
//! process (the one that moves the table's `config_applied` word to it; the
//! others see the word and only take the new file for their later
//! registrations); a bad one keeps the configuration in force, is logged
//! with its reason once and counted (`config_errors`, host-wide); a deleted
//! file keeps the last good one.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::{Mutex, RwLock};

use super::ConfigFile;
use crate::balance;
use crate::error::Result;
use crate::events::{Event, report};
use crate::quota::Quota;
use crate::shm::Shm;
use crate::task::{self, Task};

/// What identifies a version of the file without reading it.
type Stamp = Option<(u64, i64, i64, u64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// A table handle's config file as it stands.
pub(crate) struct Live {
    current: RwLock<Arc<ConfigFile>>,
    seen: Mutex<Stamp>,
}

impl Live {
    pub fn new(file: ConfigFile) -> Self {
        let seen = stamp(&file.path);
        Self {
            current: RwLock::new(Arc::new(file)),
            seen: Mutex::new(seen),
        }
    }

    /// The last good version.
    pub fn current(&self) -> Arc<ConfigFile> {
        self.current.read().clone()
    }

    /// The reaper's job: reads the file again if it changed and applies a
    /// good new version to the table, once host-wide.
    pub fn poll(&self, shm: &Arc<Shm>, quota: &Arc<Quota>) {
        let path = self.current().path.clone();
        let now = stamp(&path);
        {
            let mut seen = self.seen.lock();
            if *seen == now {
                return;
            }
            if now.is_none() {
                let subject = path.display().to_string();
                report(
                    Event::ConfigGone,
                    &subject,
                    format_args!("config file {subject} is gone; keeping its last good version"),
                );
            }
            *seen = now;
        }
        if now.is_none() {
            return;
        }
        match ConfigFile::load(&path) {
            Ok(file) => {
                let file = Arc::new(file);
                let before = std::mem::replace(&mut *self.current.write(), file.clone());
                apply(shm, quota, &file, Some(&before));
            }
            Err(e) => refused(shm, &path, &e),
        }
    }
}

/// Counts and logs a refused version once host-wide (by its bytes).
fn refused(shm: &Shm, path: &std::path::Path, e: &crate::Error) {
    let hash = std::fs::read(path).map_or(0, |b| super::fnv(&b));
    let header = shm.header();
    let seen = header.config_refused.load(Ordering::Acquire);
    if seen != hash
        && header
            .config_refused
            .compare_exchange(seen, hash, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        header.config_errors.fetch_add(1, Ordering::Relaxed);
        let subject = path.display().to_string();
        report(
            Event::ConfigRefused,
            &subject,
            format_args!("config file {subject} refused, the configuration in force is kept: {e}"),
        );
    }
}

/// Applies `file` to the table unless the table holds another version: its
/// tasks and balancers that are registered take its fields where they
/// differ (so one process writes each change, and a change a process died
/// applying is finished by the next to read the file).
///
/// `before` is the version this handle read last. When the table held it,
/// only the tasks whose fields differ between the two are visited, each
/// found by name: a reload of a file of 40,000 tasks that changes one does
/// the work of one. Otherwise (the first version, or the table held
/// another) every registered task the file names is compared.
pub(crate) fn apply(
    shm: &Arc<Shm>,
    quota: &Arc<Quota>,
    file: &ConfigFile,
    before: Option<&ConfigFile>,
) {
    let header = shm.header();
    let applied = header.config_applied.load(Ordering::Acquire);
    let moved = applied != file.hash
        && header
            .config_applied
            .compare_exchange(applied, file.hash, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
    if !moved && header.config_applied.load(Ordering::Acquire) != file.hash {
        return; // another version is the table's
    }
    let since = before.filter(|b| b.hash == applied && applied != file.hash);
    let visit: Vec<(u32, String)> = match since {
        Some(b) => file
            .tasks
            .iter()
            .filter(|(name, fields)| {
                b.tasks.get(*name) != Some(*fields) || b.keys.get(*name) != file.keys.get(*name)
            })
            .filter_map(|(name, _)| task::find(shm, name).map(|i| (i, name.clone())))
            .collect(),
        None => task::ready(shm),
    };
    // Idempotent: only tasks that differ are written, so a version a process
    // died applying half-way is finished by the next process to read it.
    let mut changed = 0;
    for (index, name) in visit {
        let Some(fields) = file.tasks.get(&name) else {
            continue;
        };
        // A handle for updates only: it never waits, so a room of its own.
        let t = Task::new(shm.clone(), quota.clone(), Arc::default(), index, &name);
        let keys = file
            .keys
            .get(&name)
            .map_or(Ok(false), |k| super::apply_keys(&t, k));
        match update_if_needed(&t, fields).and_then(|c| Ok(c | keys?)) {
            Ok(true) => changed += 1,
            Ok(false) => {}
            Err(e) => report(
                Event::ConfigRefused,
                &name,
                format_args!(
                    "config file {}: task {name:?} not updated: {e}",
                    file.path.display()
                ),
            ),
        }
    }
    for (name, section) in &file.balancers {
        if let (Some(b), Some(backends)) = (balance::find(shm, name), &section.backends) {
            let list: Vec<(&str, u32)> = backends.iter().map(|(a, w)| (a.as_str(), *w)).collect();
            if let Err(e) = b.set_backends(&list) {
                report(
                    Event::ConfigRefused,
                    name,
                    format_args!(
                        "config file {}: balancer {name:?} not updated: {e}",
                        file.path.display()
                    ),
                );
            }
        }
    }
    if !moved && changed == 0 {
        return;
    }
    let subject = file.path.display().to_string();
    report(
        Event::ConfigApplied,
        &subject,
        format_args!("config file {subject} applied: {changed} task(s) changed"),
    );
}

/// Updates `task` to the file's fields if its own settings differ.
pub(crate) fn update_if_needed(task: &Task, fields: &crate::task::TaskConfig) -> Result<bool> {
    if task.own_settings().mismatches(fields).is_empty() {
        return Ok(false);
    }
    task.update(fields)?;
    Ok(true)
}
