//! What a `database_url` names and what that database holds, for `failwell
//! check`, the start of `failwell serve` and the operator commands: where
//! the store is (from the URL alone, never its password), the server and
//! its version, and whether failwell's store is there and migrated. Looking
//! creates and changes nothing: an SQLite file is opened read-only.

use std::fmt;
use std::path::PathBuf;

use sqlx::{ConnectOptions, Connection};

use crate::error::{Context, StoreError};
use crate::{Database, Store};

/// Where a store is, read from its `database_url` without connecting. Its
/// [`Display`](fmt::Display) names the file, or the database, host, port
/// and user, never the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file.
    Sqlite {
        /// The file's path, as the URL gives it.
        path: PathBuf,
    },
    /// A PostgreSQL database.
    Postgres(Server),
    /// A MySQL or MariaDB database.
    MySql(Server),
}

/// A database on a PostgreSQL or MySQL server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// The server's host (or socket directory).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The database (`None`: the URL names none).
    pub database: Option<String>,
    /// The user failwell connects as.
    pub user: String,
}

/// The [`Server`] of parsed connect options (PostgreSQL's or MySQL's, whose
/// getters have the same names).
macro_rules! server_of {
    ($options:expr) => {{
        let options = $options;
        Server {
            host: options.get_host().to_owned(),
            port: options.get_port(),
            database: options.get_database().map(str::to_owned),
            user: options.get_username().to_owned(),
        }
    }};
}

impl Location {
    /// The location `url` names. Errors: [`StoreError::UnsupportedUrl`];
    /// [`StoreError::Database`] when the URL cannot be parsed.
    pub fn of(url: &str) -> Result<Self, StoreError> {
        match Database::of(url) {
            Some(Database::Sqlite) => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().context("parsing the SQLite URL")?;
                Ok(Self::Sqlite { path: options.get_filename().to_owned() })
            }
            Some(Database::Postgres) => {
                let options: sqlx::postgres::PgConnectOptions =
                    url.parse().context("parsing the PostgreSQL URL")?;
                Ok(Self::Postgres(server_of!(options)))
            }
            Some(Database::MySql) => {
                let options: sqlx::mysql::MySqlConnectOptions =
                    url.parse().context("parsing the MySQL URL")?;
                Ok(Self::MySql(server_of!(options)))
            }
            None => Err(StoreError::UnsupportedUrl),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite { path } => write!(f, "file {}", path.display()),
            Self::Postgres(server) | Self::MySql(server) => {
                let Server { host, port, database, user } = server;
                let database = database.as_deref().unwrap_or("(none named)");
                write!(f, "database {database} on {host}:{port} as user {user}")
            }
        }
    }
}

/// What a database holds, as [`Store::inspect`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// The server and its version: `PostgreSQL 16.4`, `MySQL 8.0.36`,
    /// `MariaDB 10.11.6`, or the SQLite library's, `SQLite 3.46.0`.
    pub server: String,
    /// PostgreSQL: the schema the store's tables are (or would be) in, the
    /// first of the connection's `search_path` that exists (`None`: none
    /// does). SQLite: the file's journal mode (`wal` once failwell opened
    /// it). `None` on MySQL.
    pub detail: Option<String>,
    /// Migrations applied, `None` when the database holds no failwell store
    /// (no `_sqlx_migrations`, `operations` and `outbox` tables).
    pub applied: Option<u32>,
    /// The migrations this build of failwell applies on this database.
    pub known: u32,
}

impl Inspection {
    /// Whether the store is there with every migration this build knows
    /// (a newer failwell may have applied more).
    pub fn migrated(&self) -> bool {
        self.applied.is_some_and(|applied| applied >= self.known)
    }
}

/// The statements that read what a database holds, and the migrations this
/// build applies there.
struct Queries {
    version: &'static str,
    detail: Option<&'static str>,
    tables: &'static str,
    migrator: sqlx::migrate::Migrator,
}

/// How many successful migrations `_sqlx_migrations` records (SQL all three
/// databases accept).
const APPLIED: &str = "SELECT COUNT(*) FROM _sqlx_migrations WHERE success";

/// Reads an [`Inspection`] on the connection `$conn` with `$queries`, then
/// closes it; the database's version text goes through `$server`.
macro_rules! inspect_on {
    ($conn:ident, $queries:expr, $server:expr) => {{
        let (conn, queries) = (&mut $conn, $queries);
        let version: String =
            sqlx::query_scalar(queries.version).fetch_one(&mut *conn).await.context("reading the version")?;
        let detail: Option<String> = match queries.detail {
            Some(sql) => sqlx::query_scalar(sql).fetch_one(&mut *conn).await.context("reading the schema")?,
            None => None,
        };
        let holds: i64 = sqlx::query_scalar(queries.tables)
            .fetch_one(&mut *conn)
            .await
            .context("looking for failwell's tables")?;
        let applied: Option<i64> = match holds {
            3 => Some(
                sqlx::query_scalar(APPLIED)
                    .fetch_one(&mut *conn)
                    .await
                    .context("counting the applied migrations")?,
            ),
            _ => None,
        };
        let _ = $conn.close().await;
        Ok(Inspection {
            server: $server(version),
            detail,
            applied: applied.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            known: u32::try_from(queries.migrator.iter().count()).unwrap_or(u32::MAX),
        })
    }};
}

impl Store {
    /// Connects to the database at `url` and reads what it holds, creating
    /// and changing nothing (an SQLite file is opened read-only, so one
    /// that does not exist is an error, not a new file). Errors:
    /// [`StoreError::UnsupportedUrl`]; the database cannot be reached or
    /// read ([`StoreError::Database`]).
    pub async fn inspect(url: &str) -> Result<Inspection, StoreError> {
        match Database::of(url) {
            Some(Database::Sqlite) => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().context("parsing the SQLite URL")?;
                let mut conn =
                    options.read_only(true).connect().await.context("opening the SQLite database")?;
                let queries = Queries {
                    version: "SELECT sqlite_version()",
                    detail: Some("PRAGMA journal_mode"),
                    tables: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' \
                             AND name IN ('_sqlx_migrations', 'operations', 'outbox')",
                    migrator: sqlx::migrate!("./migrations/sqlite"),
                };
                inspect_on!(conn, queries, |v: String| format!("SQLite {v}"))
            }
            Some(Database::Postgres) => {
                let mut conn = sqlx::PgConnection::connect(url).await.context("connecting to PostgreSQL")?;
                // In the schema the store's tables are written to (the
                // first of the search path that exists), not anywhere on it.
                let queries = Queries {
                    version: "SELECT current_setting('server_version')",
                    detail: Some("SELECT current_schema()"),
                    tables: "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema() \
                             AND tablename IN ('_sqlx_migrations', 'operations', 'outbox')",
                    migrator: sqlx::migrate!("./migrations/postgres"),
                };
                let server = |v: String| format!("PostgreSQL {}", v.split_whitespace().next().unwrap_or(""));
                inspect_on!(conn, queries, server)
            }
            Some(Database::MySql) => {
                let mut conn = sqlx::MySqlConnection::connect(url).await.context("connecting to MySQL")?;
                let queries = Queries {
                    version: "SELECT VERSION()",
                    detail: None,
                    tables: "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() \
                             AND table_name IN ('_sqlx_migrations', 'operations', 'outbox')",
                    migrator: sqlx::migrate!("./migrations/mysql"),
                };
                inspect_on!(conn, queries, mysql_server)
            }
            None => Err(StoreError::UnsupportedUrl),
        }
    }
}

/// `MariaDB 10.11.6` for MariaDB's `10.11.6-MariaDB-0+deb12u1`, `MySQL
/// 8.0.36` for MySQL's `8.0.36`.
fn mysql_server(version: String) -> String {
    let number = version.split('-').next().unwrap_or(&version);
    match version.contains("MariaDB") {
        true => format!("MariaDB {number}"),
        false => format!("MySQL {number}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_names_the_database_and_never_the_password() {
        let mysql = Location::of("mysql://app:hunter2@db.internal:3307/shop").unwrap();
        assert_eq!(mysql.to_string(), "database shop on db.internal:3307 as user app");
        let postgres =
            Location::of("postgres://failwell:hunter2@127.0.0.1/orders?options=-csearch_path%3Dfw").unwrap();
        assert_eq!(postgres.to_string(), "database orders on 127.0.0.1:5432 as user failwell");
        assert_eq!(Location::of("sqlite://data/failwell.db").unwrap().to_string(), "file data/failwell.db");
        assert!(matches!(Location::of("mongodb://x"), Err(StoreError::UnsupportedUrl)));
    }

    #[test]
    fn mariadb_is_told_from_mysql_by_its_version() {
        assert_eq!(mysql_server("10.11.6-MariaDB-0+deb12u1".into()), "MariaDB 10.11.6");
        assert_eq!(mysql_server("8.0.36".into()), "MySQL 8.0.36");
        assert_eq!(mysql_server("8.4.0-commercial".into()), "MySQL 8.4.0");
    }
}
