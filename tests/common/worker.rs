//! The process of a global-quota test: one forked child asking a task for
//! one permit at a time from an instant for some seconds, at saturating
//! demand or at a pace, counting its admissions per 1-s slice of the
//! store's clock as its host sees it; and the forking and reading of a
//! set of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flowctrl::{Decision, Table, TableOptions, TaskConfig};

use super::*;

/// What one worker does.
#[derive(Clone)]
pub struct Worker {
    task: String,
    config: TaskConfig,
    pace: Option<f64>,
    pause: Duration,
    skew_ms: i64,
}

impl Worker {
    /// Saturating demand on `task` (registered with `config`): a refused
    /// ask waits 200 µs before the next.
    pub fn new(task: &str, config: TaskConfig) -> Self {
        Self {
            task: task.to_string(),
            config,
            pace: None,
            pause: Duration::from_micros(200),
            skew_ms: 0,
        }
    }

    /// `rate` asks a second, evenly paced (`None`: saturating demand); a
    /// refused ask waits for its turn only.
    pub fn pace(mut self, rate: Option<f64>) -> Self {
        self.pace = rate;
        self
    }

    /// At saturating demand, how long a refused ask waits.
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// The host's clock is `skew_ms` off (as its options say): its slices
    /// are counted by that clock too.
    pub fn skew_ms(mut self, skew_ms: i64) -> Self {
        self.skew_ms = skew_ms;
        self
    }

    /// Opens the table at `path`, asks from `start` (monotonic) for `secs`,
    /// and returns what it saw.
    pub fn run(&self, path: &Path, opts: &TableOptions, start: Duration, secs: f64) -> Tally {
        let table = Table::open(path, opts).unwrap();
        let task = table.task(&self.task, &self.config).unwrap();
        sleep_until(start);
        let end = start + Duration::from_secs_f64(secs);
        let mut tally = Tally::default();
        let mut next = monotonic();
        while monotonic() < end {
            if let Some(rate) = self.pace {
                next += Duration::from_secs_f64(1.0 / rate);
                sleep_until(next);
            }
            let began = Instant::now();
            let decision = task.acquire(1);
            tally.slowest = tally.slowest.max(began.elapsed());
            match decision {
                Ok(Decision::Admitted(p)) => {
                    let offset = task.quota_stats().clock_offset_us;
                    let slice = (wall_us() + self.skew_ms * 1000 + offset) / 1_000_000;
                    *tally.per_slice.entry(slice).or_default() += 1;
                    drop(p);
                }
                Ok(Decision::Limited(_)) if self.pace.is_none() => std::thread::sleep(self.pause),
                Ok(Decision::Limited(_)) => {}
                Err(e) => {
                    tally.errors += 1;
                    raw_eprint(&format!("acquire failed: {e}"));
                }
            }
        }
        tally
    }
}

/// What a worker saw.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Admissions per slice (1 s).
    pub per_slice: BTreeMap<i64, u64>,
    /// Acquires that returned an error.
    pub errors: u64,
    /// The slowest acquire.
    pub slowest: Duration,
}

impl Tally {
    /// Every admission.
    pub fn admitted(&self) -> u64 {
        self.per_slice.values().sum()
    }

    /// "slice count" lines, then "end errors slowest_µs".
    fn write(&self, out: &Path) {
        let mut text: String = self
            .per_slice
            .iter()
            .map(|(s, n)| format!("{s} {n}\n"))
            .collect();
        text.push_str(&format!(
            "end {} {}\n",
            self.errors,
            self.slowest.as_micros()
        ));
        std::fs::write(out, text).unwrap();
    }

    fn read(out: &Path) -> Self {
        let mut tally = Self::default();
        for line in std::fs::read_to_string(out).unwrap().lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f[0] == "end" {
                tally.errors = f[1].parse().unwrap();
                tally.slowest = Duration::from_micros(f[2].parse().unwrap());
            } else {
                tally
                    .per_slice
                    .insert(f[0].parse().unwrap(), f[1].parse().unwrap());
            }
        }
        tally
    }
}

/// Forked workers, killed if the test fails before it reads them.
pub struct Workers {
    pids: KillOnDrop,
    outs: Vec<PathBuf>,
}

impl Workers {
    /// Forks one child per (table, options, worker), each asking from
    /// `start` for `secs`; each writes its tally to a file in `scratch`.
    pub fn fork(
        scratch: &Scratch,
        workers: &[(PathBuf, TableOptions, Worker)],
        start: Duration,
        secs: f64,
    ) -> Self {
        let mut forked = Self {
            pids: KillOnDrop::default(),
            outs: Vec::new(),
        };
        for (i, (path, opts, worker)) in workers.iter().enumerate() {
            let out = scratch.path(&format!("tally-{i}"));
            forked.outs.push(out.clone());
            let (path, opts, worker) = (path.clone(), opts.clone(), worker.clone());
            forked.pids.add(fork_guarded(move || {
                worker.run(&path, &opts, start, secs).write(&out);
                0
            }));
        }
        forked
    }

    /// Waits for every child and returns their tallies, in the order they
    /// were given.
    pub fn tallies(mut self) -> Vec<Tally> {
        for pid in self.pids.0.clone() {
            assert_eq!(wait(pid), 0, "a worker failed");
            self.pids.forget(pid);
        }
        self.outs.iter().map(|out| Tally::read(out)).collect()
    }
}

/// The tallies summed: admissions per slice, errors, the slowest acquire.
pub fn sum(tallies: &[Tally]) -> Tally {
    let mut total = Tally::default();
    for t in tallies {
        for (slice, n) in &t.per_slice {
            *total.per_slice.entry(*slice).or_default() += n;
        }
        total.errors += t.errors;
        total.slowest = total.slowest.max(t.slowest);
    }
    total
}
