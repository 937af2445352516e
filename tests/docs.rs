//! The documentation's links hold: every relative link in README.md,
//! ARCHITECTURE.md, CHANGELOG.md, docs/**/*.md and benches/*.md names a
//! file of this repository, and every `#anchor` a heading of the file it
//! points into (GitHub's slugs). No file points outside the repository
//! (`../shared`) or at an issue by number ("issue 12", "issue #12"): a
//! reader of the repository has neither. The README stays a front page:
//! at most `README_MAX_LINES` lines, its Rust example a doctest.
//!
//! Plain std: links are `[text](target)`, `![alt](target)` and
//! `[label]: target` outside code (fenced blocks and inline spans). The
//! planted-fault tests at the end make sure each check can fail.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

const README_MAX_LINES: usize = 200;

/// One thing wrong, with the file and line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Problem {
    file: PathBuf,
    line: usize,
    what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.what)
    }
}

/// The Markdown files the checks cover, relative to `root`, sorted.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for name in ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"] {
        if root.join(name).is_file() {
            files.push(PathBuf::from(name));
        }
    }
    walk_md(root, Path::new("docs"), true, &mut files);
    walk_md(root, Path::new("benches"), false, &mut files);
    files.sort();
    files
}

fn walk_md(root: &Path, dir: &Path, recurse: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let rel = dir.join(entry.file_name());
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if recurse {
                walk_md(root, &rel, true, out);
            }
        } else if rel.extension().is_some_and(|e| e == "md") {
            out.push(rel);
        }
    }
}

/// Each line outside fenced code blocks (`None` inside one, fences
/// included): where headings and links are looked for.
fn outside_fences(text: &str) -> Vec<Option<&str>> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match (fence, marker) {
            (None, Some(m)) if run >= 3 => {
                fence = Some((m, run));
                out.push(None);
            }
            (Some((m, n)), Some(c)) if c == m && run >= n && trimmed[run..].trim().is_empty() => {
                fence = None;
                out.push(None);
            }
            (Some(_), _) => out.push(None),
            (None, _) => out.push(Some(line)),
        }
    }
    out
}

/// `line` with every inline code span (`` `...` ``, any run of backticks)
/// replaced by spaces, so a link-like text inside one is not a link.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run of the same length, if any.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|c| **c == '`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.extend(std::iter::repeat_n(' ', j + run - i));
                i = j + run;
            }
            None => {
                out.extend(std::iter::repeat_n('`', run));
                i += run;
            }
        }
    }
    out
}

/// Link targets on one line of prose: `[text](target)`, `![alt](target)`
/// and a reference definition `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
    {
        let target = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
        if !target.is_empty() {
            out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
            return out;
        }
    }
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find("](") {
        let start = from + at + 2;
        // The target ends at the parenthesis that balances the opening one.
        let mut depth = 1;
        let mut end = None;
        for (k, b) in bytes.iter().enumerate().skip(start) {
            match b {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            break;
        };
        let raw = line[start..end].trim();
        // `target "title"`: the target is the first word.
        let target = raw.split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        from = end + 1;
    }
    out
}

/// GitHub's anchor for a heading's text: inline links reduced to their
/// text, lowercase, spaces to `-`, and every character but letters, digits,
/// `-` and `_` dropped.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` → `text`.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (ATX `#` headings outside
/// code), with GitHub's `-1`, `-2` suffixes for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in outside_fences(text).into_iter().flatten() {
        let trimmed = line.trim_start();
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&level) {
            continue;
        }
        let after = &trimmed[level..];
        if !(after.is_empty() || after.starts_with(' ')) {
            continue;
        }
        let title = after.trim().trim_end_matches('#').trim();
        let base = slug(title);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `path` with `.` and `..` folded away; `None` if it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Where `text` points at an issue by number: "issue 12", "Issue #12",
/// "issues #3 and 4", "issue#12".
fn issue_pointers(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("issue") {
        let start = from + at;
        let mut rest = &lower[start + "issue".len()..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        let rest = rest.trim_start_matches([' ', '\u{a0}']);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        let word_start = start == 0 || !lower[..start].ends_with(|c: char| c.is_alphanumeric());
        if word_start && rest.starts_with(|c: char| c.is_ascii_digit()) {
            let end = (start + 20..=lower.len())
                .find(|i| lower.is_char_boundary(*i))
                .unwrap_or(lower.len());
            out.push(lower[start..end].to_string());
        }
        from = start + "issue".len();
    }
    out
}

/// Everything wrong with the Markdown files `files` (relative to `root`).
fn check(root: &Path, files: &[PathBuf]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut push = |file: &Path, line: usize, what: String| {
        problems.push(Problem {
            file: file.to_path_buf(),
            line,
            what,
        })
    };
    for file in files {
        let text = match fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) => {
                push(file, 0, format!("cannot be read: {e}"));
                continue;
            }
        };
        for (i, line) in text.lines().enumerate() {
            if line.contains("../shared") {
                push(
                    file,
                    i + 1,
                    "points at ../shared, outside the repository".into(),
                );
            }
            for hit in issue_pointers(line) {
                push(
                    file,
                    i + 1,
                    format!("points at an issue by number: {hit:?}"),
                );
            }
        }
        let dir = file.parent().unwrap_or(Path::new(""));
        for (i, line) in outside_fences(&text).into_iter().enumerate() {
            let Some(line) = line else {
                continue;
            };
            for target in link_targets(&blank_code_spans(line)) {
                if let Some(what) = check_link(root, file, dir, &text, &target) {
                    push(file, i + 1, what);
                }
            }
        }
    }
    problems
}

/// What is wrong with one link target of `file` (in `dir`), if anything.
fn check_link(root: &Path, file: &Path, dir: &Path, text: &str, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link target".into());
    }
    let lower = target.to_lowercase();
    if lower.contains("://") || lower.starts_with("mailto:") {
        return None;
    }
    if target.starts_with('/') {
        return Some(format!(
            "{target}: an absolute path; link relative to the file"
        ));
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let (resolved, body) = if path.is_empty() {
        (file.to_path_buf(), Some(text.to_string()))
    } else {
        let Some(resolved) = normalize(&dir.join(path)) else {
            return Some(format!("{target}: leaves the repository"));
        };
        let full = root.join(&resolved);
        if !full.exists() {
            return Some(format!("{target}: no such file ({})", resolved.display()));
        }
        let body = if full.is_file() && resolved.extension().is_some_and(|e| e == "md") {
            fs::read_to_string(&full).ok()
        } else {
            None
        };
        (resolved, body)
    };
    let anchor = anchor?;
    let Some(body) = body else {
        return Some(format!(
            "{target}: an anchor into {}, which is not a Markdown file",
            resolved.display()
        ));
    };
    if anchors(&body).contains(anchor) {
        None
    } else {
        Some(format!(
            "{target}: {} has no heading with the anchor #{anchor}",
            resolved.display()
        ))
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_link_of_the_docs_resolves() {
    let root = root();
    let files = doc_files(&root);
    for must in ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"] {
        assert!(files.contains(&PathBuf::from(must)), "{must} is missing");
    }
    assert!(
        files.iter().filter(|f| f.starts_with("docs")).count() >= 10,
        "the docs were not found: {files:?}"
    );
    let problems = check(&root, &files);
    let report: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        report.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_page() {
    let text = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to docs/"
    );
}

/// Files whose Rust examples compile as doctests: src/lib.rs includes each
/// under `cfg(doctest)`, and `cargo test --doc` builds them.
const DOCTESTED: [&str; 3] = [
    "README.md",
    "docs/guide/limits-per-caller.md",
    "docs/guide/middleware.md",
];

#[test]
fn the_rust_examples_of_the_readme_are_doctests() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    for file in DOCTESTED {
        let include = format!("#[doc = include_str!(\"../{file}\")]");
        assert!(
            lib.contains(&include),
            "src/lib.rs no longer doctests {file}: `{include}` is gone"
        );
        let text = fs::read_to_string(root().join(file)).unwrap();
        let fences: Vec<&str> = text
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("```rust"))
            .collect();
        assert!(!fences.is_empty(), "{file} has no Rust example");
        for fence in fences {
            assert!(
                !fence.contains("ignore"),
                "{file}: `{fence}` is not compiled"
            );
        }
    }
}

// The checker itself, on planted faults.

/// A scratch tree of Markdown files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, files: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("flowctrl-docs-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (path, text) in files {
            let full = dir.join(path);
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, text).unwrap();
        }
        Scratch(dir)
    }

    fn problems(&self) -> Vec<Problem> {
        check(&self.0, &doc_files(&self.0))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const GUIDE: &str =
    "# A guide\n\n## How it works\n\nText.\n\n## How it works\n\nAgain.\n\n## `auto`: the limit\n";

#[test]
fn sound_links_pass() {
    let t = Scratch::new(
        "sound",
        &[
            (
                "README.md",
                "# Top\n\nSee [the guide](docs/guide/a.md#how-it-works), [again](docs/guide/a.md#how-it-works-1),\n\
                 [below](#top), [auto](docs/guide/a.md#auto-the-limit), [figures](benches/X.md) and [a site](https://example.com/x#y).\n",
            ),
            ("docs/guide/a.md", GUIDE),
            (
                "benches/X.md",
                "# X\n\n![plot](x.png) [up](../README.md#top)\n",
            ),
            ("benches/x.png", ""),
        ],
    );
    assert_eq!(t.problems(), vec![]);
}

#[test]
fn a_broken_link_is_caught() {
    let t = Scratch::new(
        "broken",
        &[
            (
                "README.md",
                "# Top\n\nSee [the guide](docs/guide/missing.md).\n",
            ),
            ("docs/guide/a.md", GUIDE),
        ],
    );
    let p = t.problems();
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        (p[0].file.as_path(), p[0].line),
        (Path::new("README.md"), 3)
    );
    assert!(p[0].what.contains("no such file"), "{p:?}");
}

#[test]
fn a_bad_anchor_is_caught() {
    let t = Scratch::new(
        "anchor",
        &[
            (
                "README.md",
                "# Top\n\n[one](docs/guide/a.md#how-it-work) [two](#nowhere) [three](docs/guide/a.md#how-it-works-2)\n",
            ),
            ("docs/guide/a.md", GUIDE),
        ],
    );
    let p = t.problems();
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p.iter().all(|p| p.what.contains("no heading")), "{p:?}");
}

#[test]
fn a_pointer_outside_the_repository_is_caught() {
    let t = Scratch::new(
        "shared",
        &[
            (
                "README.md",
                "# Top\n\nNotes: [there](../shared/notes.md).\n",
            ),
            (
                "docs/guide/a.md",
                "# A\n\nAs in ../shared/plan.md, in code: `../shared`.\n",
            ),
        ],
    );
    let p = t.problems();
    let shared = p
        .iter()
        .filter(|p| p.what.starts_with("points at ../shared"))
        .count();
    assert_eq!(shared, 2, "{p:?}");
    assert!(
        p.iter()
            .any(|p| p.file == Path::new("README.md") && p.what.contains("leaves")),
        "{p:?}"
    );
}

#[test]
fn an_issue_pointer_is_caught() {
    let t = Scratch::new(
        "issue",
        &[
            (
                "CHANGELOG.md",
                "# Changes\n\n- Fixed (issue 12).\n- See Issue #7 and issues #3.\n- No tissue 5 here; an issue of order stays.\n",
            ),
            ("docs/guide/a.md", GUIDE),
        ],
    );
    let p = t.problems();
    let lines: Vec<usize> = p.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![3, 4, 4], "{p:?}");
}

#[test]
fn links_in_code_are_not_links() {
    let t = Scratch::new(
        "code",
        &[
            (
                "README.md",
                "# Top\n\n```text\n[no](missing.md)\n```\n\nInline `[no](missing.md)` too.\n",
            ),
            ("docs/guide/a.md", GUIDE),
        ],
    );
    assert_eq!(t.problems(), vec![]);
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("High availability and scale"),
        "high-availability-and-scale"
    );
    assert_eq!(
        slug("`auto`: the adaptive limit"),
        "auto-the-adaptive-limit"
    );
    assert_eq!(slug("`[tasks.\"name\"]`"), "tasksname");
    assert_eq!(
        slug("Dynamic thresholds (tests/manager_dynamic.rs)"),
        "dynamic-thresholds-testsmanager_dynamicrs"
    );
    assert_eq!(slug("Why tolerance 1.25"), "why-tolerance-125");
    assert_eq!(slug("C and C++"), "c-and-c");
    assert_eq!(slug("See [the guide](x.md) now"), "see-the-guide-now");
}
