//! Every Markdown document of the repository points at things that exist: each relative
//! link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) names a file or
//! folder, and an anchor a heading of the document it names; each path written in code
//! (`` `docs/console.md` ``, `` `executor-agent/src/agent.rs` ``) that starts at one of
//! the repository's top-level folders exists. Links to the web are not fetched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sagaplane_e2e::workspace_root;

/// Folders that hold no document of ours.
const SKIPPED: [&str; 6] = [
    "target",
    "node_modules",
    ".git",
    ".interop",
    "screenshots",
    "proptest-regressions",
];

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !SKIPPED.contains(&name.as_str()) && !name.starts_with("target") {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// A heading's anchor, as GitHub makes it: lower case, spaces to `-`, punctuation gone.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown document's headings (outside code fences).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#').replace('`', "");
            out.insert(slug(&heading));
        }
    }
    out
}

/// The prose of a document: its lines outside code fences.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((n + 1, line));
        }
    }
    out
}

/// The targets of `[text](target)` links on a line.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    out
}

/// Paths written in code spans that start at a top-level folder of the repository.
fn code_paths(line: &str, roots: &BTreeSet<String>) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            let first = span.split('/').next().unwrap_or_default();
            span.contains('/')
                && roots.contains(first)
                && !span.chars().any(|c| " <>*{}$|…,=".contains(c))
        })
        .map(|span| span.trim_end_matches(':').to_owned())
        .collect()
}

#[test]
fn every_link_and_path_in_the_documents_points_at_something() {
    let root = workspace_root().canonicalize().unwrap();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.len() >= 8, "the documents were not found: {files:?}");
    let roots: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') && !name.starts_with("target"))
        .collect();
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let dir = file.parent().unwrap();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                if !linked.exists() {
                    broken.push(format!("{shown}:{n}: {target} names nothing"));
                    continue;
                }
                if let Some(anchor) = anchor
                    && linked.extension().is_some_and(|e| e == "md")
                {
                    let headings = anchors(&std::fs::read_to_string(&linked).unwrap());
                    if !headings.contains(anchor) {
                        broken.push(format!("{shown}:{n}: {target}: no heading #{anchor}"));
                    }
                }
            }
            for path in code_paths(line, &roots) {
                if !root.join(&path).exists() {
                    broken.push(format!("{shown}:{n}: `{path}` does not exist"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    let roots: BTreeSet<String> = ["docs".to_owned()].into();
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and [b](#y)."),
        ["docs/a.md#x", "#y"]
    );
    assert_eq!(
        code_paths("`docs/x.md` and `docs/<id>` and `other/y`", &roots),
        ["docs/x.md"]
    );
    assert_eq!(
        slug("6.1 Definite failures and their `class`"),
        "61-definite-failures-and-their-class"
    );
    assert!(anchors("# Title\n```\n# not a heading\n```\n## Two words\n").contains("two-words"));
}
