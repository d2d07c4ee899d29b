//! Tidy checks: the invariants of failwell's architecture, read from the
//! workspace's source files by ordinary tests, so `cargo test --workspace`
//! (and `cargo xtask test`) fails as soon as one is broken.
//!
//! - the policy crate's decision modules do no I/O and read no clock
//!   ([`policy_decisions_do_no_io_and_read_no_clock`]);
//! - SQL is written only in the store and in the cluster's PostgreSQL
//!   driver ([`sql_only_in_the_store`]);
//! - the wall clock and `std`'s monotonic clock are read only in the clock
//!   modules ([`clocks_read_only_in_clock_modules`]);
//! - `anyhow` is used only at the binary's edge
//!   ([`anyhow_only_in_main`]).
//!
//! The files are read as text: comments are skipped, string literals are
//! told apart from code, and test code (`#[cfg(test)]` items and the files
//! of `#[cfg(test)] mod NAME;`, `tests/` directories) is known, so each
//! check says which of them it covers. A failure names every offending
//! `file:line` and what to do instead.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The policy crate's modules that decide without effects: functions of
/// (configuration, what was observed, now), tested as plain tables.
const POLICY_DECISIONS: &[&str] = &[
    "backoff",
    "classify",
    "compare",
    "decision",
    "idempotency",
    "ledger",
    "manifest",
    "outcome",
    "retry_after",
];

/// The policy crate's other modules: the stateful policies, which read
/// tokio's clock ([`POLICY_DECISIONS`] are all the rest), the clock itself,
/// and the `tower` / `reqwest` adapters.
const POLICY_STATEFUL: &[&str] = &["breaker", "budget", "bulkhead", "clock", "deadline", "layer", "throttle"];

/// What a decision module must not name: effects (`tokio`, `reqwest`,
/// `sqlx`, the file system, the network, the environment, processes,
/// threads), clocks (`Instant`, `SystemTime`, the policy's own clock) and
/// hidden randomness (`rand::rng`: callers pass a generator in).
const POLICY_FORBIDDEN: &[&str] = &[
    "tokio",
    "reqwest",
    "sqlx",
    "Instant",
    "SystemTime",
    "std::fs",
    "std::net",
    "std::env",
    "std::process",
    "std::thread",
    "crate::clock",
    "rand::rng",
    "thread_rng",
];

/// Names a decision module may use after all, each with its reason.
const POLICY_ALLOWED: &[(&str, &str, &str)] = &[(
    "crates/failwell-policy/src/retry_after.rs",
    "SystemTime",
    "an HTTP-date Retry-After is wall time: the caller passes `now: SystemTime` in (reading it, \
     `SystemTime::now`, is still refused)",
)];

/// Where SQL may be written, besides test code: the store crate, and the
/// shared breakers' PostgreSQL driver (its own table, next to the Redis one).
const SQL_HOMES: &[&str] = &["crates/failwell-store/", "crates/failwell-cluster/src/postgres.rs"];

/// Files outside [`SQL_HOMES`] that may write SQL, each with its reason.
const SQL_ALLOWED: &[(&str, &str)] = &[(
    "crates/failwell/src/demo/shop.rs",
    "the demo plays the shop application: its own `orders` table, written in the same transaction as the \
     outbox message, as an application does; failwell's own tables are never touched there",
)];

/// The clock modules: the only product code that reads `SystemTime::now`
/// or `std::time::Instant::now` (tokio's `Instant::now` is free to use:
/// paused test time controls it). Each carries
/// `#[allow(clippy::disallowed_methods)]` for the same rule in `clippy.toml`.
const CLOCK_MODULES: &[&str] = &[
    // tokio's clock for the stateful policies, and wall time for HTTP dates.
    "crates/failwell-policy/src/clock.rs",
    // ms since the Unix epoch (what the store keeps), and ages of values kept in memory.
    "crates/failwell-engine/src/clock.rs",
    // The provider simulator's signed Unix timestamps: it stands for a remote provider.
    "crates/failwell-sim/src/clock.rs",
];

/// The one file that may use `anyhow`: the binary's edge, which prints an
/// error with its causes (`{:#}`) and maps it to an exit code.
const ANYHOW_HOME: &str = "crates/failwell/src/main.rs";

#[test]
fn policy_decisions_do_no_io_and_read_no_clock() {
    let workspace = Workspace::read();
    let lib = workspace.file("crates/failwell-policy/src/lib.rs");
    let mut problems = Vec::new();
    for (line, module) in lib.modules() {
        if !POLICY_DECISIONS.contains(&module.as_str()) && !POLICY_STATEFUL.contains(&module.as_str()) {
            problems.push(format!(
                "{}:{line}: module `{module}` is in neither POLICY_DECISIONS nor POLICY_STATEFUL of \
                 xtask/src/tidy.rs: say whether it decides without effects",
                lib.path
            ));
        }
    }
    for module in POLICY_DECISIONS {
        let file = format!("crates/failwell-policy/src/{module}.rs");
        let dir = format!("crates/failwell-policy/src/{module}/");
        for source in workspace.files.iter().filter(|f| f.path == file || f.path.starts_with(&dir)) {
            for name in POLICY_FORBIDDEN {
                if POLICY_ALLOWED.iter().any(|(path, allowed, _)| *path == source.path && allowed == name) {
                    continue;
                }
                for line in source.code_lines_naming(name) {
                    problems.push(format!(
                        "{}:{line}: `{name}` in a decision module of failwell-policy: decisions do no I/O and \
                         read no clock; take the value (`now`, a random generator, an observation) as an \
                         argument, or move the effect to failwell-engine",
                        source.path
                    ));
                }
            }
            for line in source.code_lines_naming("SystemTime::now") {
                if POLICY_ALLOWED.iter().any(|(path, ..)| *path == source.path) {
                    problems.push(format!(
                        "{}:{line}: `SystemTime::now` in a decision module of failwell-policy: take `now` as an \
                         argument",
                        source.path
                    ));
                }
            }
        }
    }
    assert_clean("the policy's decisions must stay pure", problems);
}

#[test]
fn sql_only_in_the_store() {
    let workspace = Workspace::read();
    let mut problems = Vec::new();
    for source in workspace.files.iter().filter(|f| !f.is_test_file) {
        if SQL_HOMES.iter().any(|home| source.path.starts_with(home))
            || SQL_ALLOWED.iter().any(|(path, _)| *path == source.path)
        {
            continue;
        }
        for literal in source.literals.iter().filter(|l| !source.is_test_line(l.line)) {
            if let Some(keyword) = sql_keyword(&literal.text) {
                problems.push(format!(
                    "{}:{}: SQL (`{keyword}`) in a string literal outside the store: give failwell-store a \
                     function for it and call that",
                    source.path, literal.line
                ));
            }
        }
        for (line, text) in source.product_code_lines() {
            for call in ["sqlx::query", "sqlx::raw_sql"] {
                if names(text, call) {
                    problems.push(format!(
                        "{}:{line}: `{call}` outside the store: give failwell-store a function for it and call \
                         that",
                        source.path
                    ));
                }
            }
        }
    }
    assert_clean("SQL belongs to failwell-store (and the cluster's PostgreSQL driver)", problems);
}

#[test]
fn clocks_read_only_in_clock_modules() {
    let workspace = Workspace::read();
    let mut problems = Vec::new();
    for source in
        workspace.files.iter().filter(|f| !f.is_test_file && !CLOCK_MODULES.contains(&f.path.as_str()))
    {
        let std_instant = source.imports_std_instant();
        for (line, text) in source.product_code_lines() {
            let read = if names(text, "SystemTime::now") {
                Some("SystemTime::now")
            } else if names(text, "std::time::Instant::now")
                || (std_instant && names_unqualified(text, "Instant::now"))
            {
                Some("std::time::Instant::now")
            } else {
                None
            };
            if let Some(read) = read {
                problems.push(format!(
                    "{}:{line}: `{read}` outside the clock modules: call failwell_engine::clock (`now_ms`, \
                     `wall`, `monotonic`) or failwell_policy::clock, or use tokio::time::Instant, which paused \
                     test time controls",
                    source.path
                ));
            }
        }
    }
    assert_clean("clocks are read in the clock modules only", problems);
}

#[test]
fn anyhow_only_in_main() {
    let workspace = Workspace::read();
    let mut problems = Vec::new();
    for source in workspace.files.iter().filter(|f| f.path != ANYHOW_HOME) {
        for line in source.code_lines_naming("anyhow") {
            problems.push(format!(
                "{}:{line}: `anyhow` outside {ANYHOW_HOME}: return a thiserror enum saying what failed (main.rs \
                 prints it with its causes)",
                source.path
            ));
        }
    }
    for manifest in &workspace.manifests {
        if manifest.path == "crates/failwell/Cargo.toml" {
            continue;
        }
        for (n, line) in manifest.text.lines().enumerate() {
            if line.trim_start().starts_with("anyhow") {
                problems.push(format!(
                    "{}:{}: depends on `anyhow`: only failwell's binary (main.rs) uses it",
                    manifest.path,
                    n + 1
                ));
            }
        }
    }
    assert_clean("anyhow is for the binary's edge only", problems);
}

/// Panics with every problem, one per line, under `rule`.
fn assert_clean(rule: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{rule}:\n{}\n", problems.join("\n"));
}

/// The SQL statement keyword `text` (a string literal's contents) starts a
/// statement with, if any: `SELECT … FROM`, `INSERT INTO`, `UPDATE … SET`,
/// `DELETE FROM`, `CREATE`/`ALTER`/`DROP` `TABLE`/`INDEX`/`SCHEMA`.
/// Keywords are matched in capitals, as failwell writes SQL, so prose
/// ("select a provider from the list") is not taken for SQL.
fn sql_keyword(text: &str) -> Option<&'static str> {
    let words: Vec<&str> =
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
    let after = |first: &str, then: &str| {
        words.iter().position(|w| *w == first).is_some_and(|at| words[at + 1..].contains(&then))
    };
    let pair = |first: &str, second: &str| words.windows(2).any(|w| w[0] == first && w[1] == second);
    if after("SELECT", "FROM") {
        return Some("SELECT … FROM");
    }
    if after("UPDATE", "SET") {
        return Some("UPDATE … SET");
    }
    let pairs: &[(&str, &str, &'static str)] = &[
        ("INSERT", "INTO", "INSERT INTO"),
        ("DELETE", "FROM", "DELETE FROM"),
        ("CREATE", "TABLE", "CREATE TABLE"),
        ("CREATE", "INDEX", "CREATE INDEX"),
        ("CREATE", "SCHEMA", "CREATE SCHEMA"),
        ("ALTER", "TABLE", "ALTER TABLE"),
        ("DROP", "TABLE", "DROP TABLE"),
        ("DROP", "SCHEMA", "DROP SCHEMA"),
    ];
    pairs.iter().find(|(a, b, _)| pair(a, b)).map(|(.., keyword)| *keyword)
}

/// Whether `code` names `path` (`Instant::now`, `tokio`, `std::fs`) as a
/// whole: not as part of a longer identifier (`MyInstant::now`,
/// `tokio_util`).
fn names(code: &str, path: &str) -> bool {
    whole(code, path).next().is_some()
}

/// Whether `code` names `path` (see [`names`]) by itself, not as the end
/// of a longer path (`tokio::time::Instant::now`).
fn names_unqualified(code: &str, path: &str) -> bool {
    whole(code, path).any(|at| !code[..at].ends_with("::"))
}

/// Where `path` stands in `code` as a whole (see [`names`]).
fn whole<'a>(code: &'a str, path: &'a str) -> impl Iterator<Item = usize> + 'a {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(path).map(|(at, _)| at).filter(move |&at| {
        let before = code[..at].chars().next_back();
        let after = code[at + path.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The workspace's Rust sources and Cargo manifests.
struct Workspace {
    files: Vec<SourceFile>,
    manifests: Vec<Manifest>,
}

/// A `Cargo.toml`, by its path from the workspace root.
struct Manifest {
    path: String,
    text: String,
}

impl Workspace {
    /// Reads every `.rs` file and `Cargo.toml` under `crates/` and `xtask/`.
    fn read() -> Self {
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
    fn file(&self, path: &str) -> &SourceFile {
        self.files.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("{path} is gone: update tidy.rs"))
    }
}

/// Every file under `dir`, sorted, skipping `target/` and hidden directories.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
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
struct SourceFile {
    /// From the workspace root, with `/`.
    path: String,
    /// The text with comments and the contents of string literals blanked
    /// out (lines kept), so code searches see neither.
    code: String,
    /// The string literals, with the line each starts on.
    literals: Vec<Literal>,
    /// Lines (1-based, inclusive ranges) of `#[cfg(test)]` items.
    test_lines: Vec<(usize, usize)>,
    /// A test target's file (`tests/`, `benches/`) or a `#[cfg(test)]`
    /// module's file.
    is_test_file: bool,
}

/// A string literal's contents, escapes left as written.
struct Literal {
    line: usize,
    text: String,
}

impl SourceFile {
    fn new(path: String, text: &str) -> Self {
        let (code, literals) = split(text);
        let is_test_file = path.split('/').any(|part| part == "tests" || part == "benches");
        let mut file = Self { path, code, literals, test_lines: Vec::new(), is_test_file };
        file.test_lines = file.cfg_test_items().into_iter().map(|(start, end, _)| (start, end)).collect();
        file
    }

    /// The code's lines, numbered from 1.
    fn code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code.lines().enumerate().map(|(n, line)| (n + 1, line))
    }

    /// The lines whose code names `path` (see [`names`]).
    fn code_lines_naming<'a>(&'a self, path: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.code_lines().filter(move |(_, text)| names(text, path)).map(|(line, _)| line)
    }

    /// The code's lines outside `#[cfg(test)]` items, numbered from 1.
    fn product_code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code_lines().filter(|(line, _)| !self.is_test_line(*line))
    }

    fn is_test_line(&self, line: usize) -> bool {
        self.test_lines.iter().any(|(start, end)| (*start..=*end).contains(&line))
    }

    /// Whether a `use` brings `std::time::Instant` in as `Instant`.
    fn imports_std_instant(&self) -> bool {
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
    fn modules(&self) -> Vec<(usize, String)> {
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
    fn test_module_paths(&self) -> Vec<String> {
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
    fn cfg_test_items(&self) -> Vec<(usize, usize, Option<String>)> {
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
