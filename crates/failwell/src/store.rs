//! The store `database_url` names, as `failwell check` prints it and
//! `failwell serve` logs it at start: which database (never a password),
//! whether it is reachable and holds failwell's store migrated, and what
//! the application's database user and failwell's own need of it (the
//! outbox contract's rights, docs/OUTBOX.md). It only describes: opening
//! and migrating the store is `failwell_store`'s.

use std::fmt::Write;

use failwell_store::{Database, Inspection, Location, Store, StoreError};

/// How long a look at the store may take: a server that never answers
/// (a dropped packet, not a refusal) is unreachable after it.
const INSPECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a store could not be looked at.
#[derive(Debug)]
pub enum Unavailable {
    /// The SQLite file does not exist yet (`failwell serve` creates it).
    NotCreated,
    /// The database could not be reached or read: the error and its causes.
    Unreachable(String),
}

/// What is known of a store: where it is, what a connection found there
/// (or why there was none), and the rights each database user needs.
#[derive(Debug)]
pub struct StoreReport {
    /// The database kind the URL names.
    pub database: Database,
    /// Where it is.
    pub location: Location,
    /// What a connection found, or why it could not look.
    pub found: Result<Inspection, Unavailable>,
    /// What the application's database user needs, to enqueue in its own
    /// transactions and read the status back.
    pub application_needs: String,
    /// What failwell's own database user needs.
    pub failwell_needs: String,
}

impl StoreReport {
    /// Looks at the store at `url` without creating or changing anything.
    /// Errors: the URL names no store or cannot be parsed (a validated
    /// configuration's never does). A store that cannot be reached is not
    /// an error: [`found`](Self::found) says why.
    pub async fn inspect(url: &str) -> Result<Self, StoreError> {
        let location = Location::of(url)?;
        let database = Database::of(url).ok_or(StoreError::UnsupportedUrl)?;
        let found = match &location {
            // Opening a missing file read-only fails with a cryptic error.
            Location::Sqlite { path } if !path.exists() => Err(Unavailable::NotCreated),
            _ => match tokio::time::timeout(INSPECT_WITHIN, Store::inspect(url)).await {
                Ok(found) => found.map_err(|e| Unavailable::Unreachable(failwell_engine::chain(&e))),
                Err(_) => {
                    Err(Unavailable::Unreachable(format!("no answer within {} s", INSPECT_WITHIN.as_secs())))
                }
            },
        };
        let detail = found.as_ref().ok().and_then(|found| found.detail.clone());
        let (application_needs, failwell_needs) = needs(&location, detail.as_deref());
        Ok(Self { database, location, found, application_needs, failwell_needs })
    }

    /// `MariaDB 10.11.6, database shop on db:3306 as user failwell`: the
    /// server as found (or the kind the URL names), and where.
    pub fn store(&self) -> String {
        let kind = match (&self.found, self.database) {
            (Ok(found), _) => found.server.clone(),
            (Err(_), Database::Sqlite) => "SQLite".into(),
            (Err(_), Database::Postgres) => "PostgreSQL".into(),
            (Err(_), Database::MySql) => "MySQL or MariaDB".into(),
        };
        match (&self.found, self.database) {
            (Ok(Inspection { detail: Some(schema), .. }), Database::Postgres) => {
                format!("{kind}, {}, schema {schema}", self.location)
            }
            _ => format!("{kind}, {}", self.location),
        }
    }

    /// Whether the store is reachable and failwell's store migrated there.
    pub fn state(&self) -> String {
        let state = match &self.found {
            Err(Unavailable::NotCreated) => {
                return "not created yet: `failwell serve` creates the file at its first start".into();
            }
            Err(Unavailable::Unreachable(why)) => return format!("not reachable: {why}"),
            Ok(found) => match found.applied {
                None => "reachable; holds no failwell store yet: `failwell serve` creates it at start".into(),
                Some(applied) if found.migrated() => {
                    format!(
                        "reachable; failwell's store is migrated ({applied} of {} migrations)",
                        found.known
                    )
                }
                Some(applied) => format!(
                    "reachable; failwell's store has {applied} of {} migrations: `failwell serve` applies the \
                     rest at start",
                    found.known
                ),
            },
        };
        match (&self.found, self.database) {
            (Ok(Inspection { detail: Some(mode), .. }), Database::Sqlite) => {
                format!("{state}; journal mode {mode}")
            }
            _ => state,
        }
    }

    /// The report's lines for `failwell check`.
    pub fn lines(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "store: {}", self.store());
        let _ = writeln!(out, "  {:<24}{}", "state", self.state());
        let _ = writeln!(out, "  {:<24}{}", "the application's user", self.application_needs);
        let _ = writeln!(out, "  {:<24}{}", "failwell's user", self.failwell_needs);
        out
    }
}

/// What the application's and failwell's database users need of the store
/// at `location`; `detail` is what [`Inspection::detail`] found (the
/// PostgreSQL schema).
fn needs(location: &Location, detail: Option<&str>) -> (String, String) {
    match location {
        Location::Sqlite { path } => {
            let path = path.display();
            (
                format!(
                    "write access to {path} and its directory (SQLite writes {path}-wal and {path}-shm beside \
                     it); the file in WAL mode (failwell sets it, the file keeps it); a busy timeout on each \
                     connection (e.g. 5000 ms) and BEGIN IMMEDIATE for a transaction that reads before it \
                     writes; then INSERT into the view failwell_outbox (docs/OUTBOX.md, On SQLite)"
                ),
                format!(
                    "read and write access to {path} and its directory: it creates the file if missing, sets \
                     WAL mode and applies its migrations at start"
                ),
            )
        }
        Location::Postgres(_) => {
            let schema = detail.map_or("of its search_path".to_owned(), |schema| schema.to_owned());
            (
                format!(
                    "INSERT, and SELECT to read the status, on the view failwell_outbox; the view's trigger runs \
                     with the application's rights, so also SELECT, INSERT, UPDATE on operations and outbox, \
                     and USAGE on the schema {schema} (docs/OUTBOX.md, Setup)"
                ),
                format!(
                    "CREATE and USAGE on the schema {schema}: it creates its tables, view, functions and \
                     triggers there at start, one process at a time, and owns them"
                ),
            )
        }
        Location::MySql(server) => {
            let database = server.database.as_deref().unwrap_or("(none named)");
            (
                "INSERT on failwell_outbox, the outbox contract's table, and SELECT on the view \
                 failwell_outbox_status to read the status; the table's triggers run with the rights of their \
                 definer, failwell's user, so nothing on failwell's own tables"
                    .to_owned(),
                format!(
                    "CREATE, CREATE VIEW, ALTER, DROP, INDEX, TRIGGER and SELECT, INSERT, UPDATE, DELETE on the \
                     database {database}: it creates its tables, view and triggers at start, and replaces the view \
                     when a migration changes it, one process at a time (with \
                     binary logging on, MySQL 8.0's default, also log_bin_trust_function_creators = 1 or \
                     SUPER, to create triggers)"
                ),
            )
        }
    }
}
