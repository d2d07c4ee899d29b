//! The alert outbox on SQLite: the shared statements ([`crate::alerts::statements`]).

use super::SqliteStore;

crate::alerts::statements::alert_statements!(store = SqliteStore);
