//! The attempt-result statements ([`crate::writes`]) on MySQL.

crate::outbox::writes::attempt_writes!(sqlx::mysql::MySqlConnection);
