//! The crate's layering, checked from the source: every `crate::…` and `super::…` path in
//! `src/` (outside the binary's `src/main.rs` and `src/cli/`, and outside `mod tests`) is
//! an edge between two files. The file graph must have no cycles, and no edge may point
//! from a room to one it is not allowed to use (docs/architecture.md draws the layers).
//! The binary's command modules (`src/cli/`) form a file graph of their own, which must
//! have no cycles either:
//!
//! core ← durable ← dataset, store ← lab; supervise and engine beside; trainer above
//! them; evidence and orchestrate on top; the binary last.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The rooms each room may use (besides itself).
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("durable", &["core"]),
    ("dataset", &["core", "durable"]),
    ("store", &["core", "durable"]),
    ("interop", &["core", "durable", "store"]),
    ("lab", &["core", "durable", "store", "supervise"]),
    // The object-store backend: the store's records, codec and checks over S3.
    ("objstore", &["core", "store"]),
    ("supervise", &["core"]),
    ("engine", &["core"]),
    ("trainer", &["core", "supervise", "engine"]),
    // `resume-test`: the user's command under the project's supervision.
    ("resume", &["core", "supervise"]),
    (
        "evidence",
        &[
            "core",
            "durable",
            "dataset",
            "store",
            "lab",
            "supervise",
            "engine",
            "trainer",
        ],
    ),
    (
        "orchestrate",
        &[
            "core",
            "durable",
            "dataset",
            "store",
            "lab",
            "supervise",
            "engine",
            "trainer",
            "evidence",
            // killer-demo's crash store on an object store.
            "objstore",
        ],
    ),
];

/// A module path (`store::writer`) for each library source file, with its text.
fn library_sources(src: &Path) -> BTreeMap<String, String> {
    sources_where(src, |rel| rel != "main.rs" && !rel.starts_with("cli/"))
}

/// A module path (`cli::store`) for each source file of the binary's command layer.
fn command_sources(src: &Path) -> BTreeMap<String, String> {
    sources_where(src, |rel| rel.starts_with("cli/"))
}

/// A module path for each source file under `src` whose relative path `keep` accepts.
fn sources_where(src: &Path, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(src).sort_by_file_name() {
        let entry = entry.expect("walk src");
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let rel = path.strip_prefix(src).expect("under src");
        let rel = rel.to_string_lossy().replace('\\', "/");
        if !keep(&rel) {
            continue;
        }
        let module = module_of(&rel);
        out.insert(module, std::fs::read_to_string(path).expect("read source"));
    }
    out
}

fn module_of(rel: &str) -> String {
    let stem = rel.trim_end_matches(".rs");
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    if stem == "lib" {
        String::new()
    } else {
        stem.replace('/', "::")
    }
}

/// The code of a file without its `#[cfg(test)] mod tests` and without comments.
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every absolute module path a file's code names (`crate::a::b::…`, `super::…`, and the
/// members of `use crate::{…}` groups), as segment lists.
fn referenced_paths(module: &str, is_mod_file: bool, code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for (start, keyword) in [("crate::", "crate"), ("super::", "super")]
        .iter()
        .flat_map(|(needle, kw)| code.match_indices(needle).map(move |(i, _)| (i, *kw)))
    {
        if start > 0
            && (bytes[start - 1].is_ascii_alphanumeric()
                || bytes[start - 1] == b'_'
                || bytes[start - 1] == b':')
        {
            continue;
        }
        let rest = &code[start + keyword.len() + 2..];
        let mut base: Vec<String> = if keyword == "crate" {
            Vec::new()
        } else {
            let mut segments: Vec<String> = module
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            // `super` of a `mod.rs` file is the module's parent; of `a/b.rs`, it is `a`.
            if !is_mod_file || !segments.is_empty() {
                segments.pop();
            }
            segments
        };
        if let Some(group) = rest.strip_prefix('{') {
            paths.extend(group_members(&base, group));
            continue;
        }
        let mut chars = rest.char_indices().peekable();
        let mut segment = String::new();
        while let Some((i, c)) = chars.next() {
            if c.is_ascii_alphanumeric() || c == '_' {
                segment.push(c);
            } else if c == ':' && rest[i..].starts_with("::") {
                chars.next();
                if let Some(group) = rest[i + 2..].strip_prefix('{') {
                    base.push(std::mem::take(&mut segment));
                    paths.extend(group_members(&base, group));
                    base.clear();
                    break;
                }
                base.push(std::mem::take(&mut segment));
            } else {
                break;
            }
        }
        if !base.is_empty() || !segment.is_empty() {
            if !segment.is_empty() {
                base.push(segment);
            }
            paths.push(base);
        }
    }
    paths
}

/// The paths of a `{a::b, c}` group (text after the `{`) below `base`.
fn group_members(base: &[String], group: &str) -> Vec<Vec<String>> {
    let end = group.find('}').unwrap_or(group.len());
    group[..end]
        .split(',')
        .map(|member| {
            let mut path = base.to_vec();
            path.extend(
                member
                    .split("::")
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty() && s != "self"),
            );
            path
        })
        .collect()
}

/// File-to-file edges: each referenced path resolves to the longest file module prefix.
fn edges(
    sources: &BTreeMap<String, String>,
    mod_files: &BTreeSet<String>,
) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (module, text) in sources {
        for path in referenced_paths(module, mod_files.contains(module), &code_of(text)) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|candidate| sources.contains_key(candidate));
            if let Some(target) = target {
                if &target != module && !target.is_empty() {
                    out.insert((module.clone(), target));
                }
            }
        }
    }
    out
}

fn room(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
}

/// Edges that leave a room for one it may not use.
fn forbidden(edges: &BTreeSet<(String, String)>) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    edges
        .iter()
        .filter(|(from, to)| {
            let (a, b) = (room(from), room(to));
            a != b && !a.is_empty() && !allowed.get(a).is_some_and(|ok| ok.contains(&b))
        })
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect()
}

/// One cycle of the file graph, if any (depth-first search with colours).
fn find_cycle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from.as_str()).or_default().push(to.as_str());
    }
    fn visit<'a>(
        node: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        colour: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        colour.insert(node, 1);
        stack.push(node);
        for &target in next.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            match colour.get(target).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|n| *n == target).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        stack[start..].iter().map(|s| s.to_string()).collect();
                    cycle.push(target.to_owned());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(target, next, colour, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        colour.insert(node, 2);
        None
    }
    let mut colour = BTreeMap::new();
    let nodes: Vec<&str> = next.keys().copied().collect();
    for node in nodes {
        if colour.get(node).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(cycle) = visit(node, &next, &mut colour, &mut stack) {
                return Some(cycle);
            }
        }
    }
    None
}

fn analyse(
    sources: &BTreeMap<String, String>,
    mod_files: &BTreeSet<String>,
) -> (Vec<String>, Option<Vec<String>>) {
    let edges = edges(sources, mod_files);
    (forbidden(&edges), find_cycle(&edges))
}

#[test]
fn the_library_is_layered_and_acyclic() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = library_sources(&src);
    assert!(sources.len() > 40, "read only {} files", sources.len());
    let mod_files: BTreeSet<String> = walkdir::WalkDir::new(&src)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "mod.rs")
        .map(|e| {
            module_of(
                &e.path()
                    .strip_prefix(&src)
                    .expect("under src")
                    .to_string_lossy(),
            )
        })
        .collect();
    let all_rooms: BTreeSet<&str> = sources
        .keys()
        .map(|m| room(m))
        .filter(|r| !r.is_empty())
        .collect();
    let known: BTreeSet<&str> = ALLOWED.iter().map(|(r, _)| *r).collect();
    assert_eq!(all_rooms, known, "every room of src/ has a row in ALLOWED");
    let (forbidden, cycle) = analyse(&sources, &mod_files);
    assert_eq!(cycle, None, "an import cycle between files");
    assert!(
        forbidden.is_empty(),
        "edges across a forbidden line:\n{}",
        forbidden.join("\n")
    );
}

#[test]
fn the_command_modules_are_acyclic() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = command_sources(&src);
    assert!(sources.len() > 10, "read only {} files", sources.len());
    assert!(sources.contains_key("cli::store") && sources.contains_key("cli::objstore"));
    let mod_files: BTreeSet<String> = ["cli".to_owned()].into();
    let edges = edges(&sources, &mod_files);
    assert!(
        edges.contains(&("cli::store".to_owned(), "cli::objstore".to_owned())),
        "the graph sees the command modules' edges: {edges:?}"
    );
    assert_eq!(
        find_cycle(&edges),
        None,
        "an import cycle between command modules"
    );
}

#[test]
fn a_cycle_between_command_modules_is_found() {
    let cyclic = synthetic(&[
        ("cli", ""),
        ("cli::store", "use super::objstore::recover;"),
        (
            "cli::objstore",
            "fn f() { super::store::print_recovery(); }",
        ),
    ]);
    let mod_files: BTreeSet<String> = ["cli".to_owned()].into();
    assert_eq!(
        find_cycle(&edges(&cyclic, &mod_files)),
        Some(vec![
            "cli::objstore".to_owned(),
            "cli::store".to_owned(),
            "cli::objstore".to_owned()
        ])
    );
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect()
}

#[test]
fn the_checker_catches_an_upward_edge_a_cycle_and_grouped_imports() {
    let none = BTreeSet::new();
    // core reaching up into store, through a grouped import.
    let upward = synthetic(&[
        (
            "core::digest",
            "use crate::{store::writer::Writer, core::canonical};",
        ),
        ("core::canonical", ""),
        ("store::writer", "use crate::core::digest::Digest;"),
    ]);
    let (forbidden, cycle) = analyse(&upward, &none);
    assert_eq!(forbidden, vec!["core::digest -> store::writer".to_owned()]);
    assert!(cycle.is_some(), "digest -> writer -> digest is a cycle");
    // A cycle inside one room, through `super::`.
    let cyclic = synthetic(&[
        ("store::codec", "use super::layout::x;"),
        ("store::layout", "fn f() { crate::store::codec::decode(); }"),
    ]);
    let (forbidden, cycle) = analyse(&cyclic, &none);
    assert!(forbidden.is_empty());
    assert_eq!(
        cycle,
        Some(vec![
            "store::codec".into(),
            "store::layout".into(),
            "store::codec".into()
        ])
    );
    // Comments and test modules are not edges.
    let quiet = synthetic(&[
        ("core::digest", "// crate::store::writer\nfn f() {}\n#[cfg(test)]\nmod tests { use crate::store::writer; }"),
        ("store::writer", ""),
    ]);
    assert_eq!(analyse(&quiet, &none), (Vec::new(), None));
}
