//! The attempt-result statements ([`crate::writes`]) on PostgreSQL.

crate::outbox::writes::attempt_writes!(sqlx::postgres::PgConnection);
