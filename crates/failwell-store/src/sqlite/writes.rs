//! The attempt-result statements ([`crate::writes`]) on SQLite.

crate::outbox::writes::attempt_writes!(sqlx::sqlite::SqliteConnection);
