//! The text fuzzers' mutations (`tests/fuzz_config.rs`, `tests/fuzz_store.rs`):
//! a corpus entry's bytes changed a few times over by byte flips, cuts,
//! repeats, splices of another entry, and tokens that break assumptions
//! (braces, escapes, bytes that are not UTF-8, numbers past every range,
//! huge values). A run is a seeded loop, replayed from its seed; its
//! length is a number of cases or minutes.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Rng, env_number};

/// Tokens that break parsers' assumptions.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"{x}",
    b"\x1b[2J",
    b"\n",
    b"\r\n",
    b"\0",
    b"\xff",
    b"\xc3",
    b"\"",
    b"'",
    b"=",
    b"[",
    b"]",
    b"[[",
    b"#",
    b"\\",
    b"\\u0000",
    b"1e300",
    b"-1e300",
    b"-1",
    b"0",
    b"1",
    b"18446744073709551616",
    b"9223372036854775808",
    b"9007199254740993",
    b"4294967296",
    b"NaN",
    b"nan",
    b"inf",
    b"-inf",
    b"-0",
    b"0.5",
    b"0o7777",
    b"0x7f",
    b"1_000",
    b"\xe2\x80\xae",
    b"\xe2\x80\x8b",
    b" ",
    b"\t",
    b"@",
    b":",
    b"/",
    b"?",
    b"&",
    b"%",
    b"left",
    b"quota",
    b"demand",
    b"[table]",
    b"[manager]",
    b"[tasks.x]",
    b"[tasks.x.policy]",
    b"store = \"unix:///s?pass=secretpw\"",
    b"key_prefix = \"a{\"",
    b"host_id = \"left\"",
    b"capacity = 0",
    b"mode = 4095",
    b"slice_ms = 1",
    b"version",
    b"global_rate",
];

/// The non-comment lines of the files of `dir` (`lines`) or the files
/// whole.
pub fn corpus(dir: &str, lines: bool) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        if lines {
            let text = String::from_utf8(bytes).unwrap();
            out.extend(
                text.lines()
                    .filter(|l| !l.starts_with('#') && !l.is_empty())
                    .map(|l| l.as_bytes().to_vec()),
            );
        } else {
            out.push(bytes);
        }
    }
    assert!(!out.is_empty(), "no corpus in {}", dir.display());
    out
}

/// `entry` changed 1 to 8 times.
pub fn mutate(rng: &mut Rng, entry: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut b = entry.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(b.len() as u64 + 1) as usize;
        match rng.below(9) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.below(8);
            }
            1 | 2 => {
                let token = rng.pick(TOKENS);
                b.splice(at..at, token.iter().copied());
            }
            3 => {
                let end = (at + rng.below(16) as usize).min(b.len());
                b.drain(at..end);
            }
            4 => {
                let end = (at + rng.below(64) as usize).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
            5 => {
                let other = rng.pick(corpus);
                let from = rng.below(other.len() as u64 + 1) as usize;
                let to = (from + rng.below(80) as usize).min(other.len());
                b.splice(at..at, other[from..to].iter().copied());
            }
            6 => {
                // A digit run replaced by a number past its range.
                if let Some(start) = (at..b.len()).find(|i| b[*i].is_ascii_digit()) {
                    let end = (start..b.len())
                        .find(|i| !b[*i].is_ascii_digit())
                        .unwrap_or(b.len());
                    let token = rng.pick(&TOKENS[17..36]);
                    b.splice(start..end, token.iter().copied());
                }
            }
            7 => {
                // A huge value.
                let n = 1 + rng.below(100_000) as usize;
                b.splice(at..at, std::iter::repeat_n(b'y', n));
            }
            _ => b.truncate(at),
        }
    }
    b
}

/// How long a run is: `FLOWCTRL_FUZZ_MINUTES`, else `FLOWCTRL_FUZZ_CASES`
/// (else `cases`); the seed is `FLOWCTRL_FUZZ_SEED` (else 1: the suite's
/// run is the same every time).
pub struct Run {
    pub seed: u64,
    cases: u64,
    deadline: Option<Instant>,
    pub done: u64,
}

impl Run {
    pub fn new(cases: u64) -> Self {
        let minutes: Option<f64> = std::env::var("FLOWCTRL_FUZZ_MINUTES")
            .ok()
            .map(|m| m.parse().expect("FLOWCTRL_FUZZ_MINUTES is a number"));
        Self {
            seed: env_number("FLOWCTRL_FUZZ_SEED", 1),
            cases: env_number("FLOWCTRL_FUZZ_CASES", cases),
            deadline: minutes.map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0)),
            done: 0,
        }
    }

    /// Whether to run another case.
    pub fn more(&mut self) -> bool {
        let more = match self.deadline {
            Some(at) => Instant::now() < at,
            None => self.done < self.cases,
        };
        self.done += more as u64;
        more
    }
}
