//! Reading the workspace's source as the tidy checks need it: which files
//! are product code, which lines are comments, strings or test code.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::names;

/// The workspace's Rust sources and Cargo manifests.
pub(super) struct Workspace {
    pub(super) files: Vec<SourceFile>,
    pub(super) manifests: Vec<Manifest>,
}

/// A `Cargo.toml`, by its path from the workspace root.
pub(super) struct Manifest {
    pub(super) path: String,
    pub(super) text: String,
}

impl Workspace {
    /// Reads every `.rs` file and `Cargo.toml` under `crates/` and `xtask/`.
    pub(super) fn read() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace root");
        let mut paths = Vec::new();
        for dir in ["crates", "xtask"] {
            walk(&root.join(dir), &mut paths);
        }
        let relative = |path: &Path| path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        let mut files = Vec::new();
        let mut manifests = Vec::new();
        for path in paths {
            let text =
                fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            match path.extension().and_then(|e| e.to_str()) {
                Some("rs") => files.push(SourceFile::new(relative(&path), &text)),
                _ if path.file_name().is_some_and(|n| n == "Cargo.toml") => {
                    manifests.push(Manifest { path: relative(&path), text })
                }
                _ => {}
            }
        }
        let test_modules: BTreeSet<String> = files.iter().flat_map(SourceFile::test_module_paths).collect();
        for file in &mut files {
            file.is_test_file |= test_modules.iter().any(|m| file.path == *m || file.path.starts_with(m));
        }
        Self { files, manifests }
    }

    /// The file at `path` (from the workspace root).
    pub(super) fn file(&self, path: &str) -> &SourceFile {
        self.files.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("{path} is gone: update tidy.rs"))
    }
}

/// Every file under `dir`, sorted, skipping `target/` and hidden directories.
pub(super) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

/// One Rust source file, split into code and string literals.
pub(super) struct SourceFile {
    /// From the workspace root, with `/`.
    pub(super) path: String,
    /// The text with comments and the contents of string literals blanked
    /// out (lines kept), so code searches see neither.
    pub(super) code: String,
    /// The string literals, with the line each starts on.
    pub(super) literals: Vec<Literal>,
    /// Lines (1-based, inclusive ranges) of `#[cfg(test)]` items.
    pub(super) test_lines: Vec<(usize, usize)>,
    /// A test target's file (`tests/`, `benches/`) or a `#[cfg(test)]`
    /// module's file.
    pub(super) is_test_file: bool,
}

/// A string literal's contents, escapes left as written.
pub(super) struct Literal {
    pub(super) line: usize,
    pub(super) text: String,
}

impl SourceFile {
    pub(super) fn new(path: String, text: &str) -> Self {
        let (code, literals) = split(text);
        let is_test_file = path.split('/').any(|part| part == "tests" || part == "benches");
        let mut file = Self { path, code, literals, test_lines: Vec::new(), is_test_file };
        file.test_lines = file.cfg_test_items().into_iter().map(|(start, end, _)| (start, end)).collect();
        file
    }

    /// The code's lines, numbered from 1.
    pub(super) fn code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code.lines().enumerate().map(|(n, line)| (n + 1, line))
    }

    /// The lines whose code names `path` (see [`names`]).
    pub(super) fn code_lines_naming<'a>(&'a self, path: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.code_lines().filter(move |(_, text)| names(text, path)).map(|(line, _)| line)
    }

    /// The code's lines outside `#[cfg(test)]` items, numbered from 1.
    pub(super) fn product_code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code_lines().filter(|(line, _)| !self.is_test_line(*line))
    }

    pub(super) fn is_test_line(&self, line: usize) -> bool {
        self.test_lines.iter().any(|(start, end)| (*start..=*end).contains(&line))
    }

    /// Whether a `use` brings `std::time::Instant` in as `Instant`.
    pub(super) fn imports_std_instant(&self) -> bool {
        let mut rest = self.code.as_str();
        while let Some(at) = rest.find("use std::time::") {
            let statement = &rest[at..rest[at..].find(';').map_or(rest.len(), |end| at + end)];
            if names(statement, "Instant") && !statement.contains("Instant as") {
                return true;
            }
            rest = &rest[at + 1..];
        }
        false
    }

    /// The modules this file declares (`mod NAME;` / `pub mod NAME;`), with
    /// their lines.
    pub(super) fn modules(&self) -> Vec<(usize, String)> {
        self.code_lines()
            .filter_map(|(line, text)| {
                let text = text.trim();
                let text = text.strip_prefix("pub ").unwrap_or(text);
                let name = text.strip_prefix("mod ")?.strip_suffix(';')?;
                Some((line, name.trim().to_owned()))
            })
            .collect()
    }

    /// The paths of the files and directories of this file's
    /// `#[cfg(test)] mod NAME;` modules: `DIR/NAME.rs`, `DIR/NAME/mod.rs`
    /// and `DIR/NAME/`, where `DIR` holds this module's submodules.
    pub(super) fn test_module_paths(&self) -> Vec<String> {
        let (dir, stem) = self.path.rsplit_once('/').unwrap_or(("", &self.path));
        let stem = stem.trim_end_matches(".rs");
        let dir = match stem {
            "lib" | "main" | "mod" => dir.to_owned(),
            _ => format!("{dir}/{stem}"),
        };
        self.cfg_test_items()
            .into_iter()
            .filter_map(|(.., module)| module)
            .flat_map(|name| [format!("{dir}/{name}.rs"), format!("{dir}/{name}/")])
            .collect()
    }

    /// Each `#[cfg(test)]` item: its first and last lines, and its name when
    /// it is a module in a file of its own (`mod NAME;`).
    pub(super) fn cfg_test_items(&self) -> Vec<(usize, usize, Option<String>)> {
        let code = self.code.as_bytes();
        let line_of = |at: usize| self.code[..at].matches('\n').count() + 1;
        let mut items = Vec::new();
        for (at, _) in self.code.match_indices("#[cfg(test)]") {
            let mut i = at + "#[cfg(test)]".len();
            // Further attributes, and whitespace.
            loop {
                while i < code.len() && code[i].is_ascii_whitespace() {
                    i += 1;
                }
                if code[i..].starts_with(b"#[") {
                    i = matching(code, i + 1).map_or(code.len(), |end| end + 1);
                } else {
                    break;
                }
            }
            let item = &self.code[i..];
            let declaration = item.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            let end = item.find([';', '{']).map_or(code.len(), |e| i + e);
            if code.get(end) == Some(&b'{') {
                let close = matching(code, end).unwrap_or(code.len() - 1);
                items.push((line_of(at), line_of(close), None));
            } else {
                let module = declaration
                    .strip_prefix("mod ")
                    .map(|rest| rest[..rest.find(';').unwrap_or(rest.len())].trim().to_owned());
                items.push((line_of(at), line_of(end.min(code.len() - 1)), module));
            }
        }
        items
    }
}

/// The index of the bracket closing the one at `open` (`{`, `[` or `(`).
fn matching(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits Rust source into code, with comments and string contents replaced
/// by spaces (newlines kept), and its string literals (`"…"`, `r#"…"#`,
/// `b"…"`). Char literals stay in the code; lifetimes are told from them.
fn split(text: &str) -> (String, Vec<Literal>) {
    let chars: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut literals = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                code.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    code.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    code.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    code.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if (c == '"' || (!after_ident && matches!(c, 'r' | 'b' | 'c')))
            && string_start(&chars, i).is_some()
        {
            let (prefix, hashes, raw) = string_start(&chars, i).unwrap();
            let start_line = line;
            for &p in &chars[i..i + prefix] {
                code.push(p);
            }
            i += prefix;
            let mut contents = String::new();
            while i < chars.len() {
                let ch = chars[i];
                if !raw && ch == '\\' {
                    contents.push(ch);
                    code.push(' ');
                    if let Some(&escaped) = chars.get(i + 1) {
                        if escaped == '\n' {
                            line += 1;
                        }
                        contents.push(escaped);
                        code.push(blank(escaped));
                    }
                    i += 2;
                    continue;
                }
                if ch == '"' && chars[i + 1..].iter().take(hashes).filter(|h| **h == '#').count() == hashes {
                    code.push('"');
                    code.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                if ch == '\n' {
                    line += 1;
                }
                contents.push(ch);
                code.push(blank(ch));
                i += 1;
            }
            literals.push(Literal { line: start_line, text: contents });
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            let end = if next == Some('\\') {
                chars.iter().skip(i + 3).position(|ch| *ch == '\'').map(|p| i + 3 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    code.push_str("' '");
                    code.extend(std::iter::repeat_n(' ', end - i - 2));
                    i = end + 1;
                }
                None => {
                    code.push(c);
                    i += 1;
                }
            }
        } else {
            if c == '\n' {
                line += 1;
            }
            code.push(c);
            i += 1;
        }
    }
    (code, literals)
}

/// When a string literal starts at `i`: the length of its opening (`"`,
/// `b"`, `r##"`), its number of `#`, and whether it is raw.
fn string_start(chars: &[char], i: usize) -> Option<(usize, usize, bool)> {
    let mut j = i;
    if matches!(chars[j], 'b' | 'c') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
    if !raw && hashes > 0 {
        return None;
    }
    j += hashes;
    (chars.get(j) == Some(&'"')).then_some((j + 1 - i, hashes, raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tidy::{names_unqualified, sql_keyword};

    #[test]
    fn the_reader_tells_code_from_comments_strings_and_tests() {
        let source = SourceFile::new(
            "crates/x/src/a.rs".into(),
            "use std::time::{Duration, Instant}; // SystemTime::now\n\
             const Q: &str = r#\"SELECT \"a\" FROM t\"#;\n\
             fn f<'a>(x: &'a str) -> char { let _ = \"Instant::now\"; '\\'' }\n\
             /* tokio\n still a comment */ fn g() {}\n\
             #[cfg(test)]\n\
             mod tests {\n    fn t() { let _ = \"INSERT INTO x\"; }\n}\n\
             #[cfg(test)]\n#[allow(dead_code)]\nmod more;\n",
        );
        assert!(source.imports_std_instant());
        assert_eq!(source.code_lines_naming("SystemTime").count(), 0, "comments are not code");
        assert_eq!(source.code_lines_naming("tokio").count(), 0, "block comments are not code");
        assert_eq!(source.code_lines_naming("Instant::now").count(), 0, "strings are not code");
        let texts: Vec<(usize, &str)> = source.literals.iter().map(|l| (l.line, l.text.as_str())).collect();
        assert_eq!(texts[0], (2, "SELECT \"a\" FROM t"));
        assert_eq!(sql_keyword(texts[0].1), Some("SELECT … FROM"));
        assert_eq!(texts[1], (3, "Instant::now"));
        assert!(source.is_test_line(7) && !source.is_test_line(4));
        assert_eq!(source.test_module_paths(), ["crates/x/src/a/more.rs", "crates/x/src/a/more/"]);
        assert_eq!(sql_keyword("select a provider from the list"), None);
        assert_eq!(sql_keyword("UPDATE outbox SET state = 'done'"), Some("UPDATE … SET"));
        assert!(names_unqualified("Instant::now()", "Instant::now"));
        assert!(!names_unqualified("tokio::time::Instant::now()", "Instant::now"));
    }
}
