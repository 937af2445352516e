//! `flowctrl-sim [--hosts N] [--slices N] [--overload X] [--only NAME,...]
//! [--csv FILE] [--check]`: runs the scenarios (see `report::scenarios`) and
//! prints the results table in markdown; `--csv` also writes the per-slice
//! figures for the plot (scripts/simulate.sh); `--check` prints each budget
//! a run misses as a line `miss <scenario>: <budget>` (tests/budgets.rs).

use std::time::Instant;

use flowctrl_sim::report::{self, Summary};
use flowctrl_sim::scenario;

/// `flowctrl-sim keys [--hosts N] [--slices N] [--local N] [--only NAME,...]
/// [--check]`: the keys' global-rate scenarios (`keyed::scenarios`), a table
/// row per slice, and with `--check` a line per budget missed.
fn keys(mut args: impl Iterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let (mut hosts, mut slices, mut local, mut only) = (1000, 5, None, None::<String>);
    let mut check = false;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--hosts" => hosts = value()?.parse()?,
            "--slices" => slices = value()?.parse()?,
            "--local" => local = Some(value()?.parse()?),
            "--only" => only = Some(value()?),
            "--check" => check = true,
            _ => return Err(format!("unknown argument {arg}").into()),
        }
    }
    println!("{}", flowctrl_sim::keyed::HEADER);
    for s in flowctrl_sim::keyed::scenarios(hosts, slices, local) {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|o| o == s.name))
        {
            continue;
        }
        let began = Instant::now();
        let run = flowctrl_sim::keyed::run(&s)?;
        print!("{}", flowctrl_sim::keyed::rows(&run));
        if check {
            for miss in flowctrl_sim::keyed::misses(&run) {
                println!("miss {}: {miss}", s.name);
            }
        }
        eprintln!("{}: {:.1} s", s.name, began.elapsed().as_secs_f64());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("keys") {
        return keys(std::env::args().skip(2));
    }
    let (mut hosts, mut slices, mut overload) = (1000, 10, 1.25);
    let (mut only, mut csv, mut check) = (None::<String>, None::<String>, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--hosts" => hosts = value()?.parse()?,
            "--slices" => slices = value()?.parse()?,
            "--overload" => overload = value()?.parse()?,
            "--only" => only = Some(value()?),
            "--csv" => csv = Some(value()?),
            "--check" => check = true,
            _ => return Err(format!("unknown argument {arg}").into()),
        }
    }
    let mut lines = String::new();
    println!("{}", report::HEADER);
    let named = report::extras(slices).into_iter().filter(|s| {
        only.as_ref()
            .is_some_and(|o| o.split(',').any(|o| o == s.name))
    });
    for s in report::scenarios(hosts, slices, overload)
        .into_iter()
        .chain(named)
    {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|o| o == s.name))
        {
            continue;
        }
        let began = Instant::now();
        let run = scenario::run(&s)?;
        let m = Summary::of(&run);
        println!("{}", report::row(&run, &m));
        if check {
            for miss in m.misses() {
                println!("miss {}: {miss}", s.name);
            }
        }
        eprintln!(
            "{}: {:.1} s; misses: {:?}",
            s.name,
            began.elapsed().as_secs_f64(),
            m.misses()
        );
        lines += &report::csv(&run);
    }
    if let Some(path) = csv {
        std::fs::write(
            path,
            format!("scenario,slice,admitted,stranded,ops,smallest\n{lines}"),
        )?;
    }
    Ok(())
}
