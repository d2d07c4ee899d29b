//! failwell's project commands, run as `cargo xtask COMMAND` (the alias is in
//! `.cargo/config.toml`).
//!
//! `cargo xtask test [ARGS]`: prints the service addresses the tests use,
//! checks in seconds that everything the tests need is there (PostgreSQL
//! and Redis reachable; Node.js with npm, g++ and make, Python 3 with venv,
//! PHP with `pdo_pgsql`, `pdo_sqlite` and `pdo_mysql`, Chromium with chromedriver), installs what is missing from
//! Debian's packages when it runs as root (otherwise prints the exact
//! install line and stops before building), then runs every test binary of
//! the workspace even when one fails (`cargo test --workspace
//! --no-fail-fast ARGS`) and ends with one `N passed, N failed` line. The
//! exit status is cargo's.

mod prerequisites;
#[cfg(test)]
mod tidy;

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};

use prerequisites::{Service, Tool};

/// Where the tests find PostgreSQL unless `DATABASE_URL` says otherwise.
const DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Where the tests find MySQL or MariaDB unless `MYSQL_URL` says otherwise.
const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// Where the tests find Redis unless `REDIS_URL` says otherwise.
const REDIS_URL: &str = "redis://127.0.0.1:6379";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("test") => test(args.collect()),
        _ => {
            eprintln!("usage: cargo xtask test [ARGS for cargo test]");
            ExitCode::from(2)
        }
    }
}

fn test(args: Vec<String>) -> ExitCode {
    let database_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DATABASE_URL.into());
    let mysql_url = std::env::var("MYSQL_URL").unwrap_or_else(|_| MYSQL_URL.into());
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| REDIS_URL.into());
    println!("DATABASE_URL={database_url} (its database must exist; each test makes a schema of its own)");
    println!("MYSQL_URL={mysql_url} (its user must create databases; each test makes one of its own)");
    println!("REDIS_URL={redis_url}");
    let services = [Service::postgres(&database_url), Service::mysql(&mysql_url), Service::redis(&redis_url)];
    let unreachable: Vec<String> = services.iter().filter_map(|s| s.check().err()).collect();
    if !unreachable.is_empty() {
        for problem in &unreachable {
            eprintln!("FATAL: {problem}");
        }
        eprintln!(
            "start them (or point DATABASE_URL / MYSQL_URL / REDIS_URL at running ones); no test is skipped"
        );
        return ExitCode::FAILURE;
    }
    let missing: Vec<&Tool> = prerequisites::TOOLS.iter().filter(|t| !t.present()).collect();
    if !missing.is_empty() {
        let packages: Vec<&str> = missing.iter().flat_map(|t| t.packages.iter().copied()).collect();
        for tool in &missing {
            eprintln!("missing: {} ({})", tool.name, tool.needed_by);
        }
        if !prerequisites::running_as_root() {
            eprintln!("install them, then run this again:\n  sudo apt-get install -y {}", packages.join(" "));
            return ExitCode::FAILURE;
        }
        if let Err(e) = prerequisites::apt_install(&packages) {
            eprintln!("FATAL: {e}");
            return ExitCode::FAILURE;
        }
        if let Some(tool) = missing.iter().find(|t| !t.present()) {
            eprintln!("FATAL: {} is still missing after installing {}", tool.name, packages.join(" "));
            return ExitCode::FAILURE;
        }
    }
    run_tests(&[("DATABASE_URL", &database_url), ("MYSQL_URL", &mysql_url), ("REDIS_URL", &redis_url)], &args)
}

/// Runs `cargo test --workspace --no-fail-fast ARGS` with the services'
/// URLs (`NAME`, value) in its environment, passing its output through,
/// and prints the sum of every `test result:` line.
fn run_tests(services: &[(&str, &str)], args: &[String]) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let child = Command::new(cargo)
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(args)
        .envs(services.iter().copied())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("FATAL: cannot run cargo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0u64, 0u64);
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some((p, f)) = totals(&line) {
                passed += p;
                failed += f;
            }
        }
    }
    let status = child.wait();
    println!("{passed} passed, {failed} failed");
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// The passed and failed counts of a `test result: ok. 3 passed; 1 failed;
/// …` line.
fn totals(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let count = |what: &str| {
        rest.split(';').find_map(|part| {
            let mut words = part.split_whitespace().rev();
            if words.next() != Some(what) {
                return None;
            }
            words.next()?.parse::<u64>().ok()
        })
    };
    Some((count("passed")?, count("failed")?))
}

#[cfg(test)]
mod tests {
    use super::totals;

    #[test]
    fn reads_the_counts_of_a_test_result_line() {
        let ok =
            "test result: ok. 33 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.01s";
        assert_eq!(totals(ok), Some((33, 0)));
        let failed = "test result: FAILED. 94 passed; 4 failed; 0 ignored; 0 measured; 0 filtered out";
        assert_eq!(totals(failed), Some((94, 4)));
        assert_eq!(totals("test foo ... ok"), None);
    }
}
