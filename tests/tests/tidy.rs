//! Tidy: tests that read the tree, not run it. The engine's module graph has no cycle and its
//! parts point one way (kernel ← domains ← engine; stores and the legacy-file machinery below the
//! domains and blind to them); every source file opens with a `//!` header; no grown fuzz
//! corpus is tracked.
//!
//! The graph is built from the source text: every `crate::…` and `super::…` path outside
//! `#[cfg(test)]` code, resolved to the file that defines the longest module prefix of it. A
//! `mod x;` declaration is structure, not an edge. Does not compile or run anything.
//!
//! Print the graph with `cargo test -p hookstate-tests --test integration tidy -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Files the scan reads at most: far above the engine's size.
const SOURCE_FILES_MAX: usize = 2_000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
        assert!(out.len() <= SOURCE_FILES_MAX, "more than {SOURCE_FILES_MAX} source files");
    }
}

/// The module path of a file under `engine/src`: `lib.rs` is `crate`, `a/mod.rs` is
/// `crate::a`, `a/b.rs` is `crate::a::b`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts = vec!["crate".to_owned()];
    for part in rel.iter().map(|p| p.to_string_lossy().into_owned()) {
        if part != "lib" && part != "mod" {
            parts.push(part);
        }
    }
    parts
}

/// The text of a file before its first `#[cfg(test)]`, without comment lines.
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end].lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Every path a `use` tree or an expression names after `crate::` or `super::` at `at`, with
/// braces expanded (`crate::a::{b, c::d}` gives `a::b` and `a::c::d`).
fn paths_at(text: &[u8], mut at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        while at < text.len() && text[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < text.len() && text[at] == b'{' {
            at += 1;
            loop {
                at = paths_at(text, at, path.clone(), out);
                while at < text.len() && text[at].is_ascii_whitespace() {
                    at += 1;
                }
                match text.get(at) {
                    Some(b',') => at += 1,
                    Some(b'}') => return at + 1,
                    _ => return at,
                }
                while at < text.len() && text[at].is_ascii_whitespace() {
                    at += 1;
                }
                if text.get(at) == Some(&b'}') {
                    return at + 1;
                }
            }
        }
        let start = at;
        while at < text.len() && (text[at].is_ascii_alphanumeric() || text[at] == b'_') {
            at += 1;
        }
        if start == at {
            out.push(path);
            return at;
        }
        path.push(String::from_utf8_lossy(&text[start..at]).into_owned());
        if text[at..].starts_with(b"::") {
            at += 2;
        } else {
            out.push(path);
            return at;
        }
    }
}

/// The modules `code` (of module `me`) refers to.
fn references(code: &str, me: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let word_start =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    for (i, _) in code.match_indices("crate::") {
        if word_start(i) {
            paths_at(bytes, i + "crate::".len(), vec!["crate".into()], &mut out);
        }
    }
    // `super::` from `a/b.rs` (module crate::a::b) is crate::a; from `a/mod.rs` (crate::a) it is
    // crate.
    let parent: Vec<String> = me[..me.len().saturating_sub(1)].to_vec();
    let _ = is_mod_file;
    for (i, _) in code.match_indices("super::") {
        if word_start(i) && !code[..i].ends_with("::") {
            paths_at(bytes, i + "super::".len(), parent.clone(), &mut out);
        }
    }
    out
}

/// The engine's module graph: each file's module and the files it refers to.
fn engine_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join("engine/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (module_of(&src, f), f.strip_prefix(&src).unwrap().display().to_string()))
        .collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let me = module_of(&src, file);
        let name = modules[&me].clone();
        let is_mod = file.file_name().is_some_and(|n| n == "mod.rs");
        let code = code_of(&fs::read_to_string(file).unwrap());
        let mut edges = BTreeSet::new();
        for path in references(&code, &me, is_mod) {
            let target = (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
            if let Some(target) = target.filter(|t| **t != name) {
                edges.insert(target.clone());
            }
        }
        graph.insert(name, edges);
    }
    graph
}

/// A cycle in `graph`, if there is one (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node.as_str()) {
            if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// The parts of the engine (ARCHITECTURE.md): which part a file belongs to.
fn part_of(file: &str) -> &'static str {
    let top = file.split('/').next().unwrap_or(file);
    match top {
        "kernel" => "kernel",
        "store" => "stores",
        "legacy" => "files",
        "core" | "feedback" | "proposals" | "alerts" | "signals" | "observer" | "session" => {
            "domains"
        }
        _ => "engine",
    }
}

/// The arrows allowed between parts (from, to); every other arrow across parts is refused.
const PART_ARROWS: [(&str, &str); 7] = [
    ("engine", "domains"),
    ("engine", "kernel"),
    ("engine", "stores"),
    ("domains", "kernel"),
    ("domains", "files"),
    ("files", "kernel"),
    ("stores", "kernel"),
];

/// File arrows allowed against the parts: `Engine::mirrored` composes the layouts of several
/// domains for one mirrored directory and hands them to the one protocol (docs/decisions.md);
/// lib.rs re-exports the durable-replace steps for the export crash simulator (only with the
/// `testing` feature).
const FILE_ARROWS: [(&str, &str); 2] =
    [("engine.rs", "legacy/mirror.rs"), ("lib.rs", "legacy/durable.rs")];

fn domain_of(file: &str) -> Option<&str> {
    (part_of(file) == "domains").then(|| file.split('/').next().unwrap_or(file))
}

fn print_graph(graph: &BTreeMap<String, BTreeSet<String>>) {
    for (file, edges) in graph {
        let edges: Vec<&str> = edges.iter().map(String::as_str).collect();
        println!("tidy graph {file} -> {}", edges.join(" "));
    }
}

#[test]
fn the_engine_module_graph_has_no_cycle() {
    let graph = engine_graph();
    print_graph(&graph);
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    println!("tidy modules={} edges={edges}", graph.len());
    assert!(graph.len() > 20, "the scan found only {} modules", graph.len());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle in engine/src: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_engine_parts_point_one_way_and_domains_never_import_each_other() {
    let graph = engine_graph();
    let mut wrong = Vec::new();
    for (file, edges) in &graph {
        for target in edges {
            let (from, to) = (part_of(file), part_of(target));
            let allowed = PART_ARROWS.contains(&(from, to))
                || FILE_ARROWS.contains(&(file.as_str(), target.as_str()));
            if from != to && !allowed {
                wrong.push(format!("{file} ({from}) -> {target} ({to})"));
            }
            if let (Some(a), Some(b)) = (domain_of(file), domain_of(target)) {
                if a != b {
                    wrong.push(format!("{file} -> {target}: domains never import each other"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "arrows against the layering:\n{}", wrong.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    let mut graph = BTreeMap::new();
    graph.insert("a.rs".to_owned(), BTreeSet::from(["b.rs".to_owned()]));
    graph.insert("b.rs".to_owned(), BTreeSet::from(["c.rs".to_owned()]));
    graph.insert("c.rs".to_owned(), BTreeSet::new());
    assert_eq!(find_cycle(&graph), None);
    graph.get_mut("c.rs").unwrap().insert("a.rs".to_owned());
    assert_eq!(find_cycle(&graph).unwrap(), ["a.rs", "b.rs", "c.rs", "a.rs"]);
}

#[test]
fn use_trees_expand_to_every_path() {
    let mut out = Vec::new();
    let code = b"a::{b, c::{d, e}, f}::g;";
    paths_at(code, 0, vec!["crate".into()], &mut out);
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["crate::a::b", "crate::a::c::d", "crate::a::c::e", "crate::a::f"]);
    let me = vec!["crate".to_owned(), "x".to_owned(), "y".to_owned()];
    let refs = references("use super::z::W; use crate::k::{v};", &me, false);
    let joined: Vec<String> = refs.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["crate::k::v", "crate::x::z::W"]);
}

#[test]
fn every_source_file_opens_with_a_module_header() {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["schema/src", "engine/src", "cli/src", "tests/src", "tests/tests", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    println!("tidy headers files={}", files.len());
    assert!(missing.is_empty(), "files without a //! header: {missing:?}");
}

#[test]
fn no_grown_fuzz_corpus_is_tracked() {
    let listing = std::process::Command::new("git")
        .args(["ls-files", "fuzz"])
        .current_dir(workspace())
        .output();
    let Some(listing) = listing.ok().filter(|o| o.status.success()) else {
        println!("tidy fuzz: not a git checkout, skipped");
        return;
    };
    let files =
        String::from_utf8_lossy(&listing.stdout).lines().map(str::to_owned).collect::<Vec<_>>();
    let grown: Vec<&String> = files
        .iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or(f);
            name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit())
        })
        .collect();
    println!("tidy fuzz files={} grown={}", files.len(), grown.len());
    assert!(files.len() < 500, "{} files tracked under fuzz/", files.len());
    assert!(
        grown.is_empty(),
        "libFuzzer-named inputs tracked under fuzz/: {:?}",
        &grown[..grown.len().min(5)]
    );
}

/// The modules the engine crate's lib.rs re-exports whole: the format crate, the bounds, and
/// (with their features) the planted bugs and the durable-replace steps. Everything else is an
/// item re-exported by name.
const REEXPORTED_MODULES: [&str; 4] = ["schema", "limits", "drill", "durable"];

#[test]
fn lib_rs_is_a_table_of_contents_and_the_cli_uses_only_it() {
    let lib = fs::read_to_string(workspace().join("engine/src/lib.rs")).unwrap();
    let mut private = 0;
    for line in code_of(&lib).lines().map(str::trim) {
        assert!(
            !line.starts_with("pub mod ") && !line.starts_with("pub(crate) mod "),
            "lib.rs: {line}"
        );
        private += usize::from(line.starts_with("mod "));
    }
    assert!(private > 10, "lib.rs declares {private} modules");
    // The CLI names engine items through the crate root only.
    let mut files = Vec::new();
    rust_files(&workspace().join("cli/src"), &mut files);
    let mut paths = 0;
    for file in &files {
        let code = code_of(&fs::read_to_string(file).unwrap());
        for (at, _) in code.match_indices("hookstate_engine::") {
            paths += 1;
            let rest = &code[at + "hookstate_engine::".len()..];
            let name: String =
                rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let module = name.chars().next().is_some_and(char::is_lowercase)
                && rest[name.len()..].starts_with("::");
            assert!(
                !module || REEXPORTED_MODULES.contains(&name.as_str()),
                "{}: hookstate_engine::{name}:: reaches below lib.rs",
                file.display()
            );
        }
    }
    println!("tidy lib modules={private} cli_paths={paths}");
}

/// The files the `mod name;` declarations of `file` bring in.
fn declared_children(file: &Path, code: &str) -> Vec<PathBuf> {
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => file.parent().unwrap().to_path_buf(),
        _ => file.with_extension(""),
    };
    let mut out = Vec::new();
    for line in code.lines().map(str::trim) {
        let line = line.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) else {
            continue;
        };
        let (flat, nested) = (dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs"));
        out.push(if flat.exists() { flat } else { nested });
    }
    out
}

#[test]
fn every_engine_source_file_is_a_declared_module() {
    let src = workspace().join("engine/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut reached = BTreeSet::new();
    let mut todo = vec![src.join("lib.rs")];
    while let Some(file) = todo.pop() {
        if !reached.insert(file.clone()) {
            continue;
        }
        // Test modules (`#[cfg(test)] mod tests;`) count too: read the whole file.
        let text = fs::read_to_string(&file).unwrap();
        todo.extend(declared_children(&file, &text).into_iter().filter(|f| f.exists()));
    }
    let orphans: Vec<String> = files
        .iter()
        .filter(|f| !reached.contains(*f))
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    println!("tidy modules reached={} files={}", reached.len(), files.len());
    assert!(orphans.is_empty(), "files no `mod` declaration brings in: {orphans:?}");
}

/// Public methods `Engine` may have (issue 11: "at most ~15"): the core primitives, the mirror,
/// and one handle per domain plus the operator's; anything else goes behind a handle.
const ENGINE_METHODS_MAX: usize = 15;

/// The `pub fn` names declared directly in the `impl Engine` blocks of `code`.
fn engine_methods(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("impl Engine {") {
        let body = &rest[at + "impl Engine {".len()..];
        let mut depth = 1usize;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i;
                break;
            }
            if depth == 1 && body[i..].starts_with("pub fn ") {
                let name = &body[i + "pub fn ".len()..];
                names.push(name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
            }
        }
        rest = &body[end..];
    }
    names
}

#[test]
fn engine_has_at_most_its_bound_of_public_methods() {
    let mut files = Vec::new();
    rust_files(&workspace().join("engine/src"), &mut files);
    let mut methods = Vec::new();
    for file in &files {
        methods.extend(engine_methods(&code_of(&fs::read_to_string(file).unwrap())));
    }
    println!("tidy engine_methods={} {}", methods.len(), methods.join(" "));
    assert!(methods.contains(&"open".to_owned()), "the scan finds Engine::open: {methods:?}");
    assert!(
        methods.len() <= ENGINE_METHODS_MAX,
        "Engine has {} public methods, more than {ENGINE_METHODS_MAX}: {methods:?}",
        methods.len()
    );
}

#[test]
fn the_method_counter_counts_a_planted_method() {
    let planted = "impl Engine {\n    pub fn open() {}\n    fn inner() { if x { y } }\n    pub(crate) fn k() {}\n    pub fn extra(&self) -> X { X {} }\n}\nimpl Other {\n    pub fn not_engine() {}\n}\nimpl Engine {\n    pub fn third() {}\n}";
    assert_eq!(engine_methods(planted), ["open", "extra", "third"]);
}
