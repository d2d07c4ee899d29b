//! Reading one operation by its key.

use sqlx::postgres::PgConnection;

use crate::Operation;
use crate::error::{Context, StoreError};
use crate::outbox::rows::{operation_from_row, select_operation};

pub(super) async fn operation_by_key(
    conn: &mut PgConnection,
    key: &str,
) -> Result<Option<Operation>, StoreError> {
    let row = sqlx::query(select_operation!("WHERE o.idempotency_key = $1"))
        .bind(key)
        .fetch_optional(conn)
        .await
        .context("reading an operation")?;
    row.as_ref().map(operation_from_row).transpose()
}
