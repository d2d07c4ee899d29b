//! Reading one operation by its key.

use sqlx::mysql::MySqlConnection;

use super::sql;
use crate::Operation;
use crate::error::{Context, StoreError};
use crate::outbox::rows::{operation_from_row, select_operation};

pub(super) async fn operation_by_key(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<Operation>, StoreError> {
    let row = sql::query(select_operation!("WHERE o.idempotency_key = $1"))
        .bind(key)
        .fetch_optional(conn)
        .await
        .context("reading an operation")?;
    row.as_ref().map(operation_from_row).transpose()
}
