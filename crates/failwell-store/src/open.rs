//! Opening the store a configuration names: SQLite, PostgreSQL or MySQL,
//! chosen by the scheme of `database_url`.

use crate::error::StoreError;
use crate::{MySqlStore, PostgresStore, SqliteStore, Store, Synchronous};

/// How to open a store: the settings of each database.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// SQLite commit durability (ignored on PostgreSQL and MySQL).
    pub synchronous: Synchronous,
    /// PostgreSQL or MySQL connections per process (ignored on SQLite,
    /// which has one writer and four readers).
    pub max_connections: u32,
}

impl Store {
    /// Opens the store at `url` (creating an SQLite file if missing) and
    /// applies its migrations. Errors: [`StoreError::UnsupportedUrl`] for
    /// another scheme; otherwise those of [`SqliteStore::open`],
    /// [`PostgresStore::open`] and [`MySqlStore::open`].
    pub async fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        match Database::of(url) {
            Some(Database::Sqlite) => SqliteStore::open(url, options.synchronous).await.map(Self::new),
            Some(Database::Postgres) => {
                PostgresStore::open(url, options.max_connections).await.map(Self::new)
            }
            Some(Database::MySql) => MySqlStore::open(url, options.max_connections).await.map(Self::new),
            None => Err(StoreError::UnsupportedUrl),
        }
    }

    /// Whether the database at `url` already holds a failwell store (its
    /// migrations, `operations` and `outbox` tables; on PostgreSQL in the
    /// schema the store would be written to),
    /// looked at without creating or changing anything: operator commands
    /// refuse a database `failwell serve` has never used, instead of
    /// turning it into one. Errors: [`StoreError::UnsupportedUrl`]; the
    /// database cannot be opened (an SQLite file that does not exist
    /// included).
    pub async fn holds_store(url: &str) -> Result<bool, StoreError> {
        Ok(Self::inspect(url).await?.applied.is_some())
    }
}

/// The database a URL names, by its scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Database {
    /// `sqlite:`.
    Sqlite,
    /// `postgres:` or `postgresql:`.
    Postgres,
    /// `mysql:` (MySQL 8.0+, MariaDB 10.6+).
    MySql,
}

impl Database {
    /// The database of `url`, `None` for any other scheme.
    pub fn of(url: &str) -> Option<Self> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase())?;
        match scheme.as_str() {
            "sqlite" => Some(Self::Sqlite),
            "postgres" | "postgresql" => Some(Self::Postgres),
            "mysql" => Some(Self::MySql),
            _ => None,
        }
    }
}
