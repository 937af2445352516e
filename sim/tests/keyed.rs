//! The keys' global-rate budgets at 1,000 hosts (see `keyed::misses`), each
//! scenario in a process of its own, all at once.

use std::process::{Command, Stdio};

#[test]
fn a_thousand_hosts_keep_the_keys_budgets() {
    let children: Vec<_> = flowctrl_sim::keyed::scenarios(1000, 4, None)
        .into_iter()
        .map(|s| {
            let child = Command::new(env!("CARGO_BIN_EXE_flowctrl-sim"))
                .args([
                    "keys", "--hosts", "1000", "--slices", "4", "--check", "--only",
                ])
                .arg(&s.name)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (s.name, child)
        })
        .collect();
    let mut misses = Vec::new();
    for (name, child) in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        eprint!("{text}");
        misses.extend(
            text.lines()
                .filter(|l| l.starts_with("miss "))
                .map(String::from),
        );
    }
    assert!(misses.is_empty(), "{misses:#?}");
}
