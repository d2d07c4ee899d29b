//! The alert outbox on PostgreSQL: the shared statements ([`crate::alerts::statements`]).

use super::PostgresStore;

crate::alerts::statements::alert_statements!(store = PostgresStore);
