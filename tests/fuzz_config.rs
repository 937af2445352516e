//! Fuzzing the config file's parser and checks: the entries of
//! `tests/fuzz/corpus/config/` mutated (`fuzz/text.rs`) and parsed as a
//! table's open and `flowctrl config check` parse them, then a file that
//! parses is checked as the open (`TableOptions::from_config`) and the
//! manager (`ManagerConfig::from_file`) check it. None may panic; every
//! refusal is one line of at most 600 bytes with no control character (a
//! hostile file cannot flood a log or drive a terminal) and names the file.
//! One case in 16 goes through a file on disk (`ConfigFile::load`: bytes
//! that are not UTF-8). A seeded loop, 2,000 cases by default (a few
//! seconds); `FLOWCTRL_FUZZ_CASES`, `FLOWCTRL_FUZZ_MINUTES` and
//! `FLOWCTRL_FUZZ_SEED` as for the table fuzzer; `scripts/fuzz.sh` runs it
//! for minutes.

mod common;
#[path = "fuzz/text.rs"]
mod text;

use std::path::Path;

use common::{Rng, Scratch};
use flowctrl::manage::ManagerConfig;
use flowctrl::{ConfigFile, Error, TableOptions};

/// What every refusal must be.
fn check_refusal(e: &Error, input: &[u8], shown: &str) {
    let m = e.message();
    let ok = m.len() <= 600 && !m.chars().any(char::is_control) && m.contains(shown);
    if !ok {
        let head: String = m.chars().take(300).collect();
        panic!(
            "refusal {head:?}... ({} bytes) of input {:?}",
            m.len(),
            String::from_utf8_lossy(&input[..input.len().min(300)])
        );
    }
}

#[test]
fn fuzz_the_config_parser() {
    let corpus = text::corpus("config", false);
    let mut run = text::Run::new(2_000);
    let mut rng = Rng::new(run.seed);
    let scratch = Scratch::new("fuzz-config");
    let on_disk = scratch.path("f.toml");
    let path = Path::new("fuzz.toml");
    let (mut parsed, mut opened, mut managed) = (0u64, 0u64, 0u64);
    while run.more() {
        let entry = rng.pick(&corpus).clone();
        let input = text::mutate(&mut rng, &entry, &corpus);
        let result = if rng.one_in(16) {
            std::fs::write(&on_disk, &input).unwrap();
            ConfigFile::load(&on_disk).map_err(|e| (e, on_disk.to_str().unwrap().to_string()))
        } else {
            match std::str::from_utf8(&input) {
                Ok(text) => ConfigFile::parse(path, text).map_err(|e| (e, "fuzz.toml".into())),
                Err(_) => continue,
            }
        };
        let file = match result {
            Ok(file) => file,
            Err((e, shown)) => {
                check_refusal(&e, &input, &shown);
                continue;
            }
        };
        parsed += 1;
        match TableOptions::from_config(&file) {
            Ok(_) => opened += 1,
            Err(e) => check_refusal(&e, &input, ""),
        }
        if file.has_manager() {
            match ManagerConfig::from_file(&file) {
                Ok(_) => managed += 1,
                Err(e) => check_refusal(&e, &input, ""),
            }
        }
    }
    eprintln!(
        "fuzz (config): FLOWCTRL_FUZZ_SEED={} cases {} parsed {parsed} opened {opened} managed {managed}",
        run.seed, run.done
    );
    assert!(
        parsed > 0 && opened > 0,
        "the mutations left nothing that parses"
    );
}
