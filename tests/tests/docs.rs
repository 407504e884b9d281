//! Every relative link in every tracked Markdown file points to a file or directory in the
//! repository (a tidy check): a moved or deleted page fails here, naming the file,
//! the line and the target.
//!
//! Does not follow web links or check anchors inside a page.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The tracked `.md` files (from git), or, outside a git checkout, every `.md` file below the
/// root except in `target/` and hidden directories.
/// The legacy layouts' test data: markdown files written as upstream writes them, hostile ones
/// (not UTF-8) included, which are not documentation.
const FIXTURES: &str = "tests/fixtures/";

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", "*.md"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success() && !out.stdout.is_empty());
    if let Some(out) = listed {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|name| !name.is_empty() && !name.starts_with(FIXTURES.as_bytes()))
            .map(|name| root.join(String::from_utf8_lossy(name).as_ref()))
            .collect();
    }
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let fixture = path.strip_prefix(root).is_ok_and(|p| p.starts_with(FIXTURES));
            if fixture {
                continue;
            }
            if path.is_dir() && !name.starts_with('.') && name != "target" {
                stack.push(path);
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    found
}

/// The link targets of a Markdown text with their line numbers: inline links `[text](target)`
/// and reference definitions `[label]: target`, outside fenced code blocks and code spans.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let trimmed = prose.trim_start();
        if trimmed.starts_with('[') {
            if let Some((_, target)) = trimmed.split_once("]: ") {
                let target = target.split_whitespace().next().unwrap_or("");
                out.push((index + 1, target.trim_start_matches('<').trim_end_matches('>').into()));
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].trim();
            let target = target.trim_start_matches('<').split(['>', ' ']).next().unwrap_or("");
            out.push((index + 1, target.to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// Whether a target is a path in this repository (not a web address, a mail address or an
/// anchor of the same page).
fn is_relative(target: &str) -> bool {
    let elsewhere = target.contains("://") || target.starts_with("mailto:");
    !(target.is_empty() || target.starts_with('#') || elsewhere)
}

/// The dead relative links of the file at `path` (relative to `root` in messages).
fn dead_links(root: &Path, path: &Path, text: &str) -> Vec<String> {
    let dir = path.parent().unwrap();
    link_targets(text)
        .into_iter()
        .filter(|(_, target)| is_relative(target))
        .filter_map(|(line, target)| {
            let file = target.split('#').next().unwrap_or("");
            let resolved = if let Some(from_root) = file.strip_prefix('/') {
                root.join(from_root)
            } else {
                dir.join(file)
            };
            let inside = resolved.canonicalize().is_ok_and(|p| p.starts_with(root));
            let shown = path.strip_prefix(root).unwrap_or(path).display();
            (!inside).then(|| format!("{shown}:{line}: {target}"))
        })
        .collect()
}

#[test]
fn the_link_check_finds_links_and_reports_a_missing_target() {
    let text =
        "See [a](docs/a.md#x) and [b](https://x.y) `[c](code.md)`.\n```\n[d](fenced.md)\n```\n\
                [ref]: <missing.md>\n";
    let targets: Vec<String> = link_targets(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["docs/a.md#x", "https://x.y", "missing.md"]);
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("docs")).unwrap();
    std::fs::write(root.path().join("docs/a.md"), "").unwrap();
    let root = root.path().canonicalize().unwrap();
    let page = root.join("README.md");
    let dead = dead_links(&root, &page, text);
    assert_eq!(dead, ["README.md:5: missing.md"]);
    assert_eq!(dead_links(&root, &page, "[up](../outside.md)").len(), 1, "a link out of the repo");
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root().canonicalize().unwrap();
    let files = markdown_files(&root);
    assert!(files.iter().any(|f| f.ends_with("README.md")), "no README among {files:?}");
    let mut dead = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        checked += link_targets(&text).iter().filter(|(_, t)| is_relative(t)).count();
        dead.extend(dead_links(&root, file, &text));
    }
    println!("docs files={} relative_links={checked} dead={}", files.len(), dead.len());
    assert!(dead.is_empty(), "links to files that are not in the repository:\n{}", dead.join("\n"));
}
