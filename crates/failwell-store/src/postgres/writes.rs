//! The attempt-result statements ([`crate::writes`]) on PostgreSQL.

crate::writes::attempt_writes!(sqlx::postgres::PgConnection);
