//! The attempt-result statements ([`crate::writes`]) on SQLite.

crate::writes::attempt_writes!(sqlx::sqlite::SqliteConnection);
