//! Every relative link in README.md and docs/ names a file that exists.

use std::path::{Path, PathBuf};

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).unwrap();
    files.extend(docs.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "md")));
    files
}

/// The targets of `[text](target)` links in `text`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut broken = Vec::new();
    for file in markdown_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for target in link_targets(&text) {
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                continue;
            }
            if !file.parent().unwrap().join(path).exists() {
                broken.push(format!("{}: {target}", file.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
