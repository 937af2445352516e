//! The config file's cost at 20,000 and 40,000 tasks of two lines each:
//! parsing and checking it (what `flowctrl config check` and every live
//! reload do), and opening a table that holds every task with it (parse,
//! check, apply: each task's fields compared, written where they differ).
//! scripts/bench-config.sh runs it in release and also times `flowctrl
//! config check`; it prints a Markdown table.

use std::path::Path;
use std::time::{Duration, Instant};

use flowctrl::{ConfigFile, Table, TableOptions, TaskConfig};

/// A file of `n` tasks, two lines each.
fn file(n: usize, rate: u32) -> String {
    let mut text = String::with_capacity(n * 40);
    for i in 0..n {
        text.push_str(&format!("[tasks.\"task-{i}\"]\nlocal_rate = {rate}\n"));
    }
    text
}

/// The best of `runs` timings of `f`.
fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("flowctrl-bench-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "| tasks | parse and check | open a table holding them, all changed | open, none changed |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    for n in [20_000, 40_000] {
        let path = dir.join(format!("f{n}.toml"));
        let text = file(n, 100);
        let parse = best(3, || {
            ConfigFile::parse(Path::new("f.toml"), &text).unwrap();
        });
        // A table holding every task, registered without the file.
        let table_path = dir.join(format!("t{n}"));
        let options = TableOptions {
            capacity: 40_960,
            max_processes: 4,
            balancers: 0,
            ..TableOptions::default()
        };
        {
            let table = Table::open(&table_path, &options).unwrap();
            for i in 0..n {
                table
                    .task(&format!("task-{i}"), &TaskConfig::new().local_rate(50.0))
                    .unwrap();
            }
        }
        std::fs::write(&path, &text).unwrap();
        let with_file = TableOptions {
            config: Some(path.clone()),
            ..options.clone()
        };
        let start = Instant::now();
        let table = Table::open(&table_path, &with_file).unwrap();
        let changed = start.elapsed();
        drop(table);
        let unchanged = best(3, || {
            drop(Table::open(&table_path, &with_file).unwrap());
        });
        println!(
            "| {n} | {} | {} | {} |",
            ms(parse),
            ms(changed),
            ms(unchanged)
        );
        let _ = std::fs::remove_file(&table_path);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
