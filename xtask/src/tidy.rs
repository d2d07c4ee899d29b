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
//!   ([`anyhow_only_in_main`]);
//! - no source file is over 600 lines unless it is listed with why it is
//!   one topic ([`files_stay_small`]).
//!
//! The files are read as text: comments are skipped, string literals are
//! told apart from code, and test code (`#[cfg(test)]` items and the files
//! of `#[cfg(test)] mod NAME;`, `tests/` directories) is known, so each
//! check says which of them it covers. A failure names every offending
//! `file:line` and what to do instead.

/// The policy crate's modules that decide without effects: functions of
/// (configuration, what was observed, now), tested as plain tables.
const POLICY_DECISIONS: &[&str] = &[
    "backoff",
    "balance",
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
                     `wall`) or failwell_policy::clock, or use tokio::time::Instant, which paused \
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

/// The most lines a source file has, unless [`LONG_FILES`] lists it.
const MAX_LINES: usize = 600;

/// Files longer than [`MAX_LINES`], each with why it is one topic.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "crates/failwell/tests/it/config.rs",
        "every refusal of a configuration, one table of cases sharing one loader",
    ),
    (
        "crates/failwell-cluster/src/tests.rs",
        "the shared breaker against both stores and Record::apply, one property test and its fixtures",
    ),
];

#[test]
fn files_stay_small() {
    let workspace = Workspace::read();
    let mut problems = Vec::new();
    for source in &workspace.files {
        let lines = source.code.lines().count();
        let listed = LONG_FILES.iter().any(|(path, _)| *path == source.path);
        if lines > MAX_LINES && !listed {
            problems.push(format!(
                "{}: {lines} lines (at most {MAX_LINES}): split it by topic, or list it in LONG_FILES with why \
                 it is one",
                source.path
            ));
        }
        if listed && lines <= MAX_LINES {
            problems.push(format!("{}: {lines} lines: take it out of LONG_FILES", source.path));
        }
    }
    assert_clean("source files stay small", problems);
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

mod source;

use source::*;
