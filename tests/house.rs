//! The shape of the house: the top-level rooms of `src/` import each other
//! in one direction only (faces → table and features → format and shm →
//! atomics), `shm/` and `format/` import no feature, the files of one room
//! import each other one way too (but the rooms `LOOPED_ROOMS` names, with
//! the reason), and no source file grows past ~500 lines without a reason
//! written here.
//!
//! The scan reads every `crate::…` path outside unit-test modules (a
//! `tests.rs` file or a trailing `#[cfg(test)] mod tests`: tests may build a
//! whole `Table`), including the groups of `use crate::{a::…, b}`, and
//! resolves the names `lib.rs` re-exports (`crate::Table`) to their rooms.
//! `src/bin/` is another crate (the `flowctrl` command, whose `crate::` is
//! its own and which sees the library through its public API only): it is
//! held to the length limit, not scanned for imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Rooms that implement behaviour: nothing below them may import them.
const FEATURES: &[&str] = &[
    "task", "quota", "balance", "table", "token", "ffi", "view", "metrics", "manage",
];

/// Files allowed past the limit, and why.
const LONG_FILES: &[(&str, &str)] = &[(
    "limit/ledger.rs",
    "the crash-exact ledger protocol and its exhaustive interleaving tests belong together",
)];
const MAX_LINES: usize = 520;
/// Rooms held to a tighter limit, and why.
const ROOM_MAX_LINES: &[(&str, usize, &str)] = &[(
    "quota",
    400,
    "the global-quota protocol is read whole by whoever changes it: one concept a file",
)];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segments of every `crate::` path in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    paths_after(code, "crate::")
}

/// The first segments of every path in `code` that begins with `prefix`
/// (`crate::`, `super::`, `crate::quota::`), groups split.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find(prefix) {
        let begin = at + found;
        let start = begin + prefix.len();
        at = start;
        if begin > 0 && (bytes[begin - 1].is_ascii_alphanumeric() || bytes[begin - 1] == b'_') {
            continue; // `mycrate::`
        }
        if begin > 1 && &bytes[begin - 2..begin] == b"::" {
            continue; // `super::super::` seen from its second half
        }
        if bytes.get(start) == Some(&b'{') {
            // A group: split its top level on commas.
            let mut depth = 0;
            let mut item = String::new();
            for &b in &bytes[start + 1..] {
                match b {
                    b'{' => depth += 1,
                    b'}' if depth == 0 => break,
                    b'}' => depth -= 1,
                    b',' if depth == 0 => {
                        out.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(b as char);
            }
            out.push(first_segment(&item));
        } else {
            out.push(first_segment(&code[start..]));
        }
    }
    out.retain(|s| !s.is_empty() && s != "super");
    out
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Names `lib.rs` re-exports, mapped to the room they come from.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let stmt = &stmt[at + "pub use ".len()..];
        let room = first_segment(stmt);
        let rest = &stmt[room.len()..];
        let list = match (rest.find('{'), rest.rfind('}')) {
            (Some(a), Some(b)) => rest[a + 1..b].to_string(),
            _ => rest.rsplit("::").next().unwrap_or("").to_string(),
        };
        for name in list.split(',') {
            let name = name.split(" as ").last().unwrap().trim();
            let name = name.rsplit("::").next().unwrap().trim();
            if !name.is_empty() {
                names.insert(name.to_string(), room.clone());
            }
        }
    }
    names
}

fn room_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

fn graph() -> Graph {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let names = reexports(&lib);
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let mut graph = Graph::new();
    for file in files {
        let room = room_of(&file);
        if room == "lib" || room == "bin" || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let edges = graph.entry(room.clone()).or_default();
        for segment in crate_paths(&code(&text)) {
            let target = match names.get(&segment) {
                Some(room) => room.clone(),
                // An item of lib.rs itself (`crate::LAYOUT_VERSION`).
                None if segment.starts_with(char::is_uppercase) => "lib".to_string(),
                None => segment,
            };
            if target != room && target != "self" {
                edges.insert(target);
            }
        }
    }
    graph
}

/// Rooms whose files still import each other in a loop, and why: the list
/// only shrinks (a listed room that stops looping fails the test, so the
/// entry is removed with the loop).
const LOOPED_ROOMS: &[(&str, &str)] = &[];

/// The files of room `room` as nodes (a file `x.rs` or a folder `x/`; the
/// room's `mod.rs`, its face, is left out: children use its types) and
/// the imports between them: `super::x` from a direct child,
/// `super::super::x` from a file of a child folder, `crate::room::x`.
fn room_graph(room: &str) -> Graph {
    let dir = src().join(room);
    let mut files = Vec::new();
    sources(&dir, &mut files);
    let node_of = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(&dir).unwrap();
        let first = rel.components().next()?.as_os_str().to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        (name != "mod" && name != "tests").then_some(name)
    };
    let nodes: BTreeSet<String> = files.iter().filter_map(|f| node_of(f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(node) = node_of(file) else { continue };
        let depth = file.strip_prefix(&dir).unwrap().components().count();
        let text = code(&std::fs::read_to_string(file).unwrap());
        let mut targets = paths_after(&text, &format!("crate::{room}::"));
        match depth {
            1 => targets.extend(paths_after(&text, "super::")),
            _ => targets.extend(paths_after(&text, "super::super::")),
        }
        let edges = graph.entry(node.clone()).or_default();
        for target in targets {
            if target != node && nodes.contains(&target) {
                edges.insert(target);
            }
        }
    }
    graph
}

#[test]
fn the_files_of_a_room_import_each_other_one_way() {
    let mut rooms = Vec::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "bin") {
            rooms.push(path.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    rooms.sort();
    let mut found = Vec::new();
    for room in &rooms {
        let looped = LOOPED_ROOMS.iter().any(|(r, _)| r == room);
        match cycle(&room_graph(room)) {
            Some(c) if !looped => found.push(format!("{room}: {}", c.join(" -> "))),
            None if looped => found.push(format!(
                "{room} is listed in LOOPED_ROOMS but no longer loops: remove it"
            )),
            _ => {}
        }
    }
    assert!(found.is_empty(), "import loops inside a room: {found:#?}");
}

#[test]
fn a_planted_loop_inside_a_room_is_found() {
    let text = "use super::{fair::share, pull};\nlet x = crate::quota::spell::size();";
    assert_eq!(paths_after(text, "super::"), ["fair", "pull"]);
    assert_eq!(paths_after(text, "crate::quota::"), ["spell"]);
    assert_eq!(
        paths_after("use super::super::chunk::x;", "super::super::"),
        ["chunk"]
    );
    assert!(paths_after("use super::super::chunk::x;", "super::").is_empty());
    // A loop among three files is found; the same files one way are not.
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    let looped = graph(&[("pull", "chunk"), ("chunk", "spell"), ("spell", "pull")]);
    assert_eq!(cycle(&looped).unwrap().len(), 4);
    let one_way = graph(&[("pull", "chunk"), ("chunk", "spell"), ("pull", "spell")]);
    assert!(cycle(&one_way).is_none());
    // The real room scans: the quota room was rebuilt one way.
    assert!(cycle(&room_graph("quota")).is_none());
}

/// A cycle of the graph, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        room: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|r| r == room) {
            let mut found = path[at..].to_vec();
            found.push(room.to_string());
            return Some(found);
        }
        if !done.insert(room.to_string()) {
            return None;
        }
        path.push(room.to_string());
        for next in graph.get(room).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|room| visit(graph, room, &mut Vec::new(), &mut done))
}

#[test]
fn the_scan_sees_groups_reexports_and_skips_comments_and_tests() {
    let paths = crate_paths(
        "use crate::{format::{A, B}, words::Outcome};\nlet x = crate::shm::Shm::open();",
    );
    assert_eq!(paths, ["format", "words", "shm"]);
    assert!(
        code("use crate::a; // crate::b\n#[cfg(test)]\nmod tests { crate::c }")
            .contains("crate::a")
    );
    assert!(!code("// crate::b\n#[cfg(test)]\nmod tests { crate::c }").contains("crate::"));
    let names =
        reexports("pub use task::{Permit, Task};\npub use limit::adaptive::{Spec as LimiterSpec};");
    assert_eq!(names["Task"], "task");
    assert_eq!(names["LimiterSpec"], "limit");
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert!(cycle(&g).is_some(), "a planted cycle is found");
}

#[test]
fn rooms_import_each_other_one_way() {
    let graph = graph();
    for (room, edges) in &graph {
        eprintln!(
            "{room} -> {}",
            Vec::from_iter(edges.iter().cloned()).join(" ")
        );
    }
    assert!(
        graph.contains_key("task") && graph["task"].contains("shm"),
        "{graph:?}"
    );
    assert_eq!(cycle(&graph), None, "an import cycle between rooms");
}

#[test]
fn the_file_and_its_format_import_no_feature() {
    let graph = graph();
    // `events` too: the file layer logs through it.
    for low in [
        "shm", "format", "limit", "words", "error", "clock", "events",
    ] {
        let bad: Vec<_> = graph[low]
            .iter()
            .filter(|r| FEATURES.contains(&r.as_str()))
            .collect();
        assert!(bad.is_empty(), "{low} imports the feature(s) {bad:?}");
    }
    let format: Vec<_> = graph["format"].iter().cloned().collect();
    assert!(
        format
            .iter()
            .all(|r| ["limit", "words", "error"].contains(&r.as_str())),
        "format imports {format:?}: it knows bytes and value types only"
    );
}

#[test]
fn no_source_file_is_past_the_limit_without_a_reason() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let mut long = Vec::new();
    for file in files {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        let rel = file
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .to_string();
        let allowed = LONG_FILES.iter().any(|(f, _)| *f == rel);
        let max = ROOM_MAX_LINES
            .iter()
            .find(|(room, _, _)| rel.starts_with(&format!("{room}/")))
            .map_or(MAX_LINES, |(_, max, _)| *max);
        if lines > max && !allowed {
            long.push(format!("{rel}: {lines} lines (limit {max})"));
        }
    }
    assert!(long.is_empty(), "files past their limit: {long:?}");
}
