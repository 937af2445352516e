//! Runs under `flowctrl manage`: the manager process, and the hosts'
//! counts per slice ("admitted success dropped") passed through files.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Admitted, success and dropped per slice.
pub type Counts = BTreeMap<u64, [u64; 3]>;

/// Starts `flowctrl manage --config file`, its log in `log`.
pub fn spawn(file: &Path, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flowctrl"))
        .args(["manage", "--config"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("flowctrl manage")
}

/// A [`spawn`]ed manager, killed and reaped however the test ends.
pub struct Manager(Child);

impl Manager {
    pub fn start(file: &Path, log: &Path) -> Self {
        Self(spawn(file, log))
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The callers' counts added up.
pub fn sum(parts: impl IntoIterator<Item = Counts>) -> Counts {
    let mut all = Counts::new();
    for part in parts {
        for (s, c) in part {
            let e = all.entry(s).or_default();
            (0..3).for_each(|i| e[i] += c[i]);
        }
    }
    all
}

/// Writes `counts` to `path`, a line per slice.
pub fn write(path: &Path, counts: &Counts) {
    let text: String = counts
        .iter()
        .map(|(s, c)| format!("{s} {} {} {}\n", c[0], c[1], c[2]))
        .collect();
    std::fs::write(path, text).unwrap();
}

/// Reads what [`write`] wrote.
pub fn read(path: &Path) -> Counts {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<u64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
            (f[0], [f[1], f[2], f[3]])
        })
        .collect()
}
