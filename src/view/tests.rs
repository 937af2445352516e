//! The view against real table files: truncated, changed in place, replaced.

use super::*;
use crate::{Table, TableOptions, TaskConfig};
use std::os::unix::fs::FileExt;

/// A table with task "api" at a fresh path under /dev/shm, no process
/// attached to it: (path, its size).
fn table(tag: &str) -> (std::path::PathBuf, u64) {
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/flowctrl-view-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let options = TableOptions {
        capacity: 4,
        max_processes: 4,
        ..TableOptions::default()
    };
    let t = Table::open(&path, &options).unwrap();
    t.task("api", &TaskConfig::new().local_rate(10.0)).unwrap();
    drop(t);
    let len = std::fs::metadata(&path).unwrap().len();
    (path, len)
}

fn resize(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len).unwrap();
}

#[test]
fn a_table_truncated_under_a_view_is_an_error_of_that_read() {
    let (path, len) = table("shrank");
    let view = View::open(&path).unwrap();
    let copy = view.snapshot().unwrap();
    resize(&path, 4096);
    let e = view.tasks().unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Corrupt);
    assert!(
        e.message()
            .contains("the table shrank under the view: it is 4096 bytes"),
        "{e}"
    );
    // A copy taken before reads on: it is this process's memory.
    assert_eq!(copy.tasks().len(), 1);
    assert_eq!(copy.task("api").unwrap().settings.local.local_rate, 10.0);
    resize(&path, 0);
    assert!(
        view.snapshot()
            .unwrap_err()
            .message()
            .contains("it is 0 bytes")
    );
    // Grown again: zeros where the table was, which tmpfs shows as holes.
    resize(&path, len);
    let e = view.snapshot().unwrap_err();
    assert!(e.message().contains("has holes"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_header_changed_in_place_is_an_error_and_a_replaced_table_is_noticed() {
    let (path, _) = table("header");
    let view = View::open(&path).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let id_at = std::mem::offset_of!(crate::format::Header, table_id) as u64;
    f.write_all_at(&[0x5a; 8], id_at).unwrap();
    let e = view.snapshot().unwrap_err();
    assert!(
        e.message().contains("the table's header changed in place"),
        "{e}"
    );
    let cap_at = std::mem::offset_of!(crate::format::Header, task_capacity) as u64;
    f.write_all_at(&u32::MAX.to_le_bytes(), cap_at).unwrap();
    let e = view.snapshot().unwrap_err();
    assert!(e.message().contains("changed in place"), "{e}");
    assert!(!view.replaced());
    // A new table renamed over the path: the view reads its own file
    // still, and says the path names another.
    let (other, _) = table("header-next");
    std::fs::rename(&other, &path).unwrap();
    assert!(view.replaced());
    assert!(View::open(&path).unwrap().snapshot().is_ok());
    std::fs::remove_file(&path).unwrap();
}
