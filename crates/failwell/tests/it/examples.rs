//! The example applications in `examples/` (Python, Node.js, PHP), run as
//! real processes: each inserts an order and its outbox message in one
//! transaction, or rolls both back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::helpers::Gateway;

/// The languages with an example for each database.
pub const LANGUAGES: [&str; 3] = ["python", "node", "php"];

/// The database an example writes to.
#[derive(Clone, Copy)]
pub enum Database {
    /// `enqueue_order.*`: psycopg, pg, PDO pgsql; the connection from libpq's
    /// environment variables.
    Postgres,
    /// `enqueue_order_sqlite.*`: sqlite3, better-sqlite3, PDO sqlite; the
    /// database file as the first argument.
    Sqlite,
    /// `enqueue_order_mysql.*`: PyMySQL, mysql2, PDO mysql; the database's
    /// `mysql://` URL as the first argument.
    Mysql,
}

/// The repository's directory `name` (`examples`, `bench`).
pub fn repository(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name)
}

/// The interpreter and script of `language`'s example for `database`,
/// with its libraries installed on first use (`python/requirements.txt` in
/// a virtual environment under the tests' temporary directory, again when
/// the file changes; the Node.js packages with `npm ci`); PHP's PDO driver
/// must be there (`cargo xtask test` installs it).
pub fn example(language: &str, database: Database) -> (String, PathBuf) {
    let examples = repository("examples");
    let run = |program: &str, args: &[&str], dir: &Path| {
        let status = Command::new(program)
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap_or_else(|e| panic!("{program} is needed for the {language} example: {e}"));
        assert!(status.success(), "{program} {args:?} failed");
    };
    let suffix = match database {
        Database::Postgres => "",
        Database::Sqlite => "_sqlite",
        Database::Mysql => "_mysql",
    };
    match language {
        "python" => {
            let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("examples-venv");
            let python = venv.join("bin/python");
            if !python.exists() {
                run("python3", &["-m", "venv", venv.to_str().unwrap()], &examples);
            }
            // The requirements installed last, kept in the environment.
            let installed = venv.join("requirements.txt");
            let wanted = std::fs::read_to_string(examples.join("python/requirements.txt")).unwrap();
            if std::fs::read_to_string(&installed).ok().as_deref() != Some(wanted.as_str()) {
                let pip = venv.join("bin/pip");
                run(pip.to_str().unwrap(), &["install", "-q", "-r", "python/requirements.txt"], &examples);
                std::fs::write(&installed, wanted).unwrap();
            }
            (python.to_str().unwrap().to_owned(), examples.join(format!("python/enqueue_order{suffix}.py")))
        }
        "node" => {
            if ["pg", "better-sqlite3", "mysql2"]
                .iter()
                .any(|package| !examples.join("node/node_modules").join(package).exists())
            {
                run("npm", &["ci", "--silent", "--no-audit", "--no-fund"], &examples.join("node"));
            }
            ("node".to_owned(), examples.join(format!("node/enqueue_order{suffix}.js")))
        }
        _ => {
            let (driver, package) = match database {
                Database::Postgres => ("pdo_pgsql", "php-pgsql"),
                Database::Sqlite => ("pdo_sqlite", "php-sqlite3"),
                Database::Mysql => ("pdo_mysql", "php-mysql"),
            };
            let modules = Command::new("php").arg("-m").output().unwrap_or_else(|e| {
                panic!("php is needed for the PHP example (apt-get install php-cli {package}): {e}")
            });
            assert!(
                String::from_utf8_lossy(&modules.stdout).contains(driver),
                "PHP's {driver} is needed for the PHP example (apt-get install {package})"
            );
            ("php".to_owned(), examples.join(format!("php/enqueue_order{suffix}.php")))
        }
    }
}

/// Runs every language's example for `database` twice: once failing after
/// its insert (exit 3, rolled back: `rolled-back-LANGUAGE`), once
/// committing order `order-LANGUAGE` of 1010, 1020, 1030 cents. `command`
/// gives the example's process, its arguments so far: the database's
/// (`[]` or the file) come first. Returns the committed orders'
/// references.
pub fn enqueue_with_each(database: Database, command: impl Fn(Command) -> Command) -> Vec<String> {
    for (i, language) in LANGUAGES.into_iter().enumerate() {
        let (program, script) = example(language, database);
        let run = |reference: String, flag: Option<&str>| {
            let mut base = Command::new(&program);
            base.arg(&script);
            let output =
                command(base).arg(&reference).arg((1010 + 10 * i).to_string()).args(flag).output().unwrap();
            let text = format!(
                "{language} {reference}: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            (output.status.code(), text)
        };
        // Rolled back after both inserts: neither the order nor the message stays.
        let (code, text) = run(format!("rolled-back-{language}"), Some("--fail-after-enqueue"));
        assert_eq!(code, Some(3), "{text}");
        let (code, text) = run(format!("order-{language}"), None);
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains("outbox message"), "{text}");
    }
    LANGUAGES.iter().map(|l| format!("order-{l}")).collect()
}

/// Checks through the gateway's API that every committed order succeeded
/// under its reference and that no rolled-back one left a message.
pub async fn settled_and_rolled_back(gateway: &Gateway, references: &[String]) {
    for reference in references {
        let op = gateway.settled(reference, Duration::from_secs(20)).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(op["reference"], reference.as_str());
        let rolled_back = reference.replace("order-", "rolled-back-");
        let status = gateway.http.get(format!("{}/v1/operations/{rolled_back}", gateway.base)).send().await;
        assert_eq!(status.unwrap().status(), 404, "{rolled_back} left a message");
    }
}

/// Checks that the provider charged each of `references` exactly once.
pub fn charged_once(sim: &failwell_sim::Simulator, references: &[String]) {
    let effects = sim.effects();
    for reference in references {
        assert_eq!(effects.by_reference[reference].effects, 1, "{reference} charged once");
    }
}
