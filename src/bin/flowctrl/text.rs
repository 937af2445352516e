//! How numbers and tables are written for people: columns aligned, times
//! with a unit that keeps them short, `-` for "none".

use std::fmt::Write;
use std::time::Duration;

/// Text for a terminal: every control character but the line break, and
/// every invisible or direction-changing format character, written as its
/// escape (`\u{1b}`), so a task name, host id or path read from a table or
/// the store cannot move the cursor, clear the screen or reorder what is
/// shown. Every text view prints through it ([`print`], [`table`]).
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let hostile = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c as u32, 0x00AD | 0x061C | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
                | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB)
    };
    if !text.chars().any(hostile) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hostile(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Prints a text view's output on stdout, through [`printable`].
pub(crate) fn print(text: &str) {
    print!("{}", printable(text));
}

/// Prints one line on stdout, through [`printable`].
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    println!("{}", printable(&args.to_string()));
}

/// Rows under a header, each column as wide as its widest cell, two spaces
/// apart; numbers right-aligned, text left-aligned. Cells are
/// [`printable`] before they are measured.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c).into_owned()).collect())
        .collect();
    let rows = &rows[..];
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| !rows.is_empty() && rows.iter().all(|r| r.get(i).is_some_and(|c| is_number(c))))
        .collect();
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            if i > 0 {
                line.push_str("  ");
            }
            if numeric[i] {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// A cell that reads as a number (or as "none"): right-aligned.
fn is_number(cell: &str) -> bool {
    cell == "-"
        || cell
            .trim_end_matches(['%', 's'])
            .trim_end_matches(['/', 'm', 'µ', 'n', ' '])
            .trim_start_matches(['+', '-'])
            .parse::<f64>()
            .is_ok()
}

/// A duration in the unit that keeps it short: `850 ns`, `12.3 µs`,
/// `1.20 ms`, `3.50 s`.
pub(crate) fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

/// [`duration`] of nanoseconds; `-` for none.
pub(crate) fn ns(ns: u64) -> String {
    if ns == 0 {
        "-".into()
    } else {
        duration(Duration::from_nanos(ns))
    }
}

/// A signed offset in µs: `+0.150 ms`, `-2.000 ms`.
pub(crate) fn offset_us(us: i64) -> String {
    format!("{:+.3} ms", us as f64 / 1e3)
}

/// A count that 0 means "none" for: `-`, else the number.
/// A count where 0 means "chosen by flowctrl".
pub(crate) fn auto(n: u32) -> String {
    if n == 0 { "auto".into() } else { n.to_string() }
}

/// "  shards N" for a task spread over several store keys, else nothing.
pub(crate) fn shards(n: u32) -> String {
    if n > 1 {
        format!("  shards {n}")
    } else {
        String::new()
    }
}

pub(crate) fn or_none(n: u64) -> String {
    if n == 0 { "-".into() } else { n.to_string() }
}

/// A rate that 0 means "none" for: `-`, else `N/s`.
pub(crate) fn rate(r: f64) -> String {
    if r == 0.0 {
        "-".into()
    } else {
        format!("{r}/s")
    }
}

/// A per-second figure of `top`: one decimal.
pub(crate) fn per_sec(r: f64) -> String {
    format!("{r:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_go_right() {
        let t = table(
            &["TASK", "ADMITTED"],
            &[
                vec!["api".into(), "5".into()],
                vec!["batch".into(), "1200".into()],
            ],
        );
        assert_eq!(t, "TASK   ADMITTED\napi           5\nbatch      1200\n");
        assert_eq!(duration(Duration::from_micros(1500)), "1.50 ms");
        assert_eq!(offset_us(-2000), "-2.000 ms");
        assert!(is_number("1.50 ms") && is_number("-") && !is_number("open"));
    }

    #[test]
    fn escapes_are_written_out() {
        assert_eq!(printable("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\n");
        assert_eq!(printable("x\u{202e}y\r"), "x\\u{202e}y\\u{d}");
        assert!(matches!(
            printable("plain ключ"),
            std::borrow::Cow::Borrowed(_)
        ));
        let t = table(&["NAME"], &[vec!["\u{1b}[2J".into()]]);
        assert!(!t.contains('\u{1b}'), "{t}");
    }
}
