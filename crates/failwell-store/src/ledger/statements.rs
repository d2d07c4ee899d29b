//! The ledger role's statements ([`ledger_statements!`]).

/// The columns of a transfer as [`crate::ledger::rows::transfer_from_row`]
/// reads them (`ledger_transfers t` left joined with `operations o` on
/// `o.hold_id = t.id`), for `concat!`.
macro_rules! transfer_columns {
    () => {
        "t.id, t.debit_account, t.credit_account, t.unit, t.amount, t.pending, t.state, t.posted_amount, \
         t.expires_at_ms, t.created_at_ms, t.ended_at_ms, t.ended_by, t.request_hash, \
         o.idempotency_key AS operation_key, o.status AS operation_status \
         FROM ledger_transfers t LEFT JOIN operations o ON o.hold_id = t.id "
    };
}

/// The columns of an account as [`crate::ledger::rows::account_from_row`]
/// reads them, for `concat!`.
macro_rules! account_columns {
    () => {
        "id, unit, floor, posted, debits_pending, credits_pending, created_at_ms, updated_at_ms"
    };
}

/// One JSON array of `rows`, each an object without its `null` members
/// (a missing member reads as NULL on every database's row source).
pub(crate) fn json_rows(rows: &[serde_json::Value]) -> String {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| match row {
            serde_json::Value::Object(members) => serde_json::Value::Object(
                members.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect(),
            ),
            other => other.clone(),
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

/// Implements [`LedgerStore`](crate::LedgerStore) for `store` and
/// [`LedgerConnection`](crate::LedgerConnection) for `conn`, in the
/// invoking module, with the same SQL on every database (`$N` parameters,
/// run by the backend's `sql` module). The store provides `begin()` and
/// `read_pool()`. The invoker gives:
/// - `ids`: a subquery of the texts of the JSON array `$1`;
/// - `lock_accounts`: a statement reading the accounts whose ids are the
///   JSON array `$1` ([`account_columns!`]), locked,
///   in id order;
/// - `lock_transfers`: the same for the transfers (their `id` only);
/// - `transfer_rows`, `entry_rows`: row sources named `r` of the JSON
///   arrays of objects `$1` that [`crate::ledger::plan::Plan`] builds;
/// - `update_accounts`: one update of the accounts in the JSON array of
///   objects `$1` (`id`, `posted`, `debits_pending`, `credits_pending`),
///   `updated_at_ms` set to `$2`;
/// - `open`: an insert of an account (id, unit, floor, now) that does
///   nothing when the id exists.
macro_rules! ledger_statements {
    (
        store = $store:ty,
        conn = $conn:ty,
        ids = $ids:literal,
        lock_accounts = $lock_accounts:expr,
        lock_transfers = $lock_transfers:expr,
        transfer_rows = $transfer_rows:literal,
        entry_rows = $entry_rows:literal,
        update_accounts = $update_accounts:literal,
        open = $open:literal $(,)?
    ) => {
        use std::collections::{BTreeSet, HashMap};

            use failwell_policy::{HoldAction, HoldState};

            use super::sql;
            use crate::error::{Context as _, StoreError};
            use crate::ledger::model::{
                Ended, Entry, LedgerStats, NewAccount, NewTransfer, Opened, Swept, Transfer, TransferRefusal,
                TransferResult, valid_id,
            };
            use crate::ledger::plan::{self, Known, Locked, Plan};
            use crate::ledger::rows;
            use crate::ledger::statements::json_rows;
            use crate::ledger::{HoldEnd, sweep_action};

            /// The accounts `ids`, locked in id order.
            async fn lock_accounts(
                conn: &mut $conn,
                ids: BTreeSet<&str>,
            ) -> Result<HashMap<String, Locked>, StoreError> {
                let ids: Vec<&str> = ids.into_iter().collect();
                let rows = sql::query($lock_accounts)
                    .bind(serde_json::to_string(&ids).unwrap_or_default())
                    .fetch_all(&mut *conn)
                    .await
                    .context("locking ledger accounts")?;
                rows.iter().map(rows::locked_from_row).collect()
            }

            /// The transfers `ids` that exist, with their operation's status.
            async fn read_transfers(
                conn: &mut $conn,
                ids: &[&str],
            ) -> Result<Vec<(Known, Option<String>)>, StoreError> {
                let rows = sql::query(concat!("SELECT ", crate::ledger::statements::transfer_columns!(), "WHERE t.id IN ", $ids))
                    .bind(serde_json::to_string(ids).unwrap_or_default())
                    .fetch_all(&mut *conn)
                    .await
                    .context("reading transfers")?;
                rows.iter()
                    .map(|row| {
                        let status = crate::operator::rows::OperatorRow::value(row, "operation_status")
                            .context("reading transfers")?;
                        Ok((rows::transfer_from_row(row)?, status))
                    })
                    .collect()
            }

            /// Locks the transfers `ids` (in id order, before their accounts).
            async fn lock_transfers(conn: &mut $conn, ids: &[&str]) -> Result<(), StoreError> {
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                sql::query($lock_transfers)
                    .bind(serde_json::to_string(&ids).unwrap_or_default())
                    .fetch_all(&mut *conn)
                    .await
                    .context("locking transfers")?;
                Ok(())
            }

            /// Writes `plan`: new transfers, holds ended (by `by`, or
            /// `expiry` for an expired one), accounts, journal.
            async fn write_plan(conn: &mut $conn, plan: &Plan, now_ms: i64, by: &str) -> Result<(), StoreError> {
                if !plan.new_transfers.is_empty() {
                    sql::query(concat!(
                        "INSERT INTO ledger_transfers (id, debit_account, credit_account, unit, amount, pending, \
                         state, posted_amount, expires_at_ms, request_hash, created_at_ms) \
                         SELECT r.id, r.debit_account, r.credit_account, r.unit, r.amount, r.pending, r.state, \
                         r.posted_amount, r.expires_at_ms, r.request_hash, r.created_at_ms FROM ",
                        $transfer_rows
                    ))
                    .bind(json_rows(&plan.new_transfers))
                    .execute(&mut *conn)
                    .await
                    .context("recording transfers")?;
                }
                for (id, state, posted_amount) in &plan.ended {
                    let by = if *state == HoldState::Expired { "expiry" } else { by };
                    sql::query(
                        "UPDATE ledger_transfers SET state = $2, posted_amount = $3, ended_at_ms = $4, ended_by = $5, \
                         recheck = 0, follow_tried_at_ms = NULL WHERE id = $1",
                    )
                    .bind(id)
                    .bind(state.as_str())
                    .bind(posted_amount)
                    .bind(now_ms)
                    .bind(by)
                    .execute(&mut *conn)
                    .await
                    .context("ending a hold")?;
                }
                if !plan.accounts.is_empty() {
                    let accounts: Vec<serde_json::Value> = plan
                        .accounts
                        .iter()
                        .map(|(id, b)| {
                            serde_json::json!({
                                "id": id,
                                "posted": b.posted,
                                "debits_pending": b.debits_pending,
                                "credits_pending": b.credits_pending,
                            })
                        })
                        .collect();
                    sql::query($update_accounts)
                        .bind(serde_json::Value::Array(accounts).to_string())
                        .bind(now_ms)
                        .execute(&mut *conn)
                        .await
                        .context("updating ledger accounts")?;
                }
                if !plan.entries.is_empty() {
                    sql::query(concat!(
                        "INSERT INTO ledger_entries (account_id, transfer_id, event, posted, debits_pending, \
                         credits_pending, created_at_ms) SELECT r.account_id, r.transfer_id, r.event, r.posted, \
                         r.debits_pending, r.credits_pending, r.created_at_ms FROM ",
                        $entry_rows
                    ))
                    .bind(json_rows(&plan.entries))
                    .execute(&mut *conn)
                    .await
                    .context("writing the ledger's journal")?;
                }
                Ok(())
            }

            /// [`crate::Ledger::transfer`] on `conn`.
            pub(super) async fn apply_transfers(
                conn: &mut $conn,
                batch: &[NewTransfer],
                now_ms: i64,
            ) -> Result<Vec<TransferResult>, StoreError> {
                let accounts = lock_accounts(
                    conn,
                    batch.iter().flat_map(|t| [t.debit_account.as_str(), t.credit_account.as_str()]).collect(),
                )
                .await?;
                let ids: Vec<&str> = batch.iter().map(|t| t.id.as_str()).collect();
                let known: HashMap<String, Known> = read_transfers(conn, &ids)
                    .await?
                    .into_iter()
                    .map(|(known, _)| (known.transfer.id.clone(), known))
                    .collect();
                let mut plan = Plan::default();
                let results = plan::transfers(batch, &accounts, &known, now_ms, &mut plan);
                write_plan(conn, &plan, now_ms, "api").await?;
                Ok(results)
            }

            /// Ties hold `hold` to operation `operation_id`.
            pub(super) async fn tie_hold(conn: &mut $conn, hold: &str, operation_id: i64) -> Result<(), StoreError> {
                sql::query("UPDATE operations SET hold_id = $1 WHERE id = $2")
                    .bind(hold)
                    .bind(operation_id)
                    .execute(&mut *conn)
                    .await
                    .context("tying a hold to its operation")?;
                Ok(())
            }

            /// Ends the locked holds `holds` (with their operation's
            /// status) as `action` says, by `by`.
            async fn end_locked(
                conn: &mut $conn,
                holds: &[(Known, Option<HoldAction>)],
                now_ms: i64,
                by: &str,
            ) -> Result<(Plan, Vec<Result<Transfer, TransferRefusal>>), StoreError> {
                let accounts = lock_accounts(
                    conn,
                    holds
                        .iter()
                        .flat_map(|(h, _)| [h.transfer.debit_account.as_str(), h.transfer.credit_account.as_str()])
                        .collect(),
                )
                .await?;
                let mut plan = Plan::default();
                let mut ended = Vec::with_capacity(holds.len());
                for (hold, action) in holds {
                    let Some(action) = action else { continue };
                    ended.push(plan::end_hold(&hold.transfer, *action, &accounts, now_ms, &mut plan));
                }
                write_plan(conn, &plan, now_ms, by).await?;
                Ok((plan, ended))
            }

            #[async_trait::async_trait]
            impl crate::LedgerStore for $store {
                async fn open_account(&self, account: NewAccount, now_ms: i64) -> Result<Opened, StoreError> {
                    if !valid_id(&account.id, 255) {
                        return Err(StoreError::InvalidAccount(
                            "an account id is 1 to 255 bytes of printable ASCII without spaces".into(),
                        ));
                    }
                    if !valid_id(&account.unit, 16) {
                        return Err(StoreError::InvalidAccount(
                            "a unit is 1 to 16 bytes of printable ASCII without spaces".into(),
                        ));
                    }
                    if let Some(floor) = account.floor.filter(|floor| *floor > 0) {
                        return Err(StoreError::InvalidAccount(format!(
                            "a floor is at most 0 (an account opens with nothing), not {floor}"
                        )));
                    }
                    let mut tx = self.begin().await?;
                    let created = sql::query($open)
                        .bind(&account.id)
                        .bind(&account.unit)
                        .bind(account.floor)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("opening an account")?
                        .rows_affected()
                        > 0;
                    let row = sql::query(concat!("SELECT ", crate::ledger::statements::account_columns!(), " FROM ledger_accounts WHERE id = $1"))
                        .bind(&account.id)
                        .fetch_one(&mut *tx)
                        .await
                        .context("reading an account")?;
                    tx.commit().await.context("committing an account")?;
                    let stored = rows::account_from_row(&row)?;
                    Ok(if created {
                        Opened::Created(stored)
                    } else if stored.unit == account.unit && stored.floor == account.floor {
                        Opened::Existing(stored)
                    } else {
                        Opened::Differs(stored)
                    })
                }

                async fn transfer(
                    &self,
                    batch: Vec<NewTransfer>,
                    now_ms: i64,
                ) -> Result<Vec<TransferResult>, StoreError> {
                    // A transfer id another transaction inserted meanwhile
                    // (with other accounts, so no lock ordered the two):
                    // run again, the batch finds it.
                    let mut retries = 0;
                    loop {
                        let applied = crate::error::retry_conflicts!(async {
                            let mut tx = self.begin().await?;
                            let results = apply_transfers(&mut tx, &batch, now_ms).await?;
                            tx.commit().await.context("committing transfers")?;
                            Ok::<_, StoreError>(results)
                        });
                        match applied {
                            Err(e) if e.is_unique_violation() && retries < crate::error::CONFLICT_RETRIES => {
                                retries += 1
                            }
                            done => break done,
                        }
                    }
                }

                async fn end_hold(&self, id: &str, end: HoldEnd, now_ms: i64) -> Result<Ended, StoreError> {
                    crate::error::retry_conflicts!(async {
                        let mut tx = self.begin().await?;
                        lock_transfers(&mut tx, &[id]).await?;
                        let Some((hold, _)) = read_transfers(&mut tx, &[id]).await?.pop() else {
                            return Ok(Ended::NotFound);
                        };
                        if let Some(operation) = &hold.transfer.operation {
                            let reason = TransferRefusal::Invalid(format!(
                                "hold {id:?} is tied to operation {operation:?}: its outcome posts or voids it"
                            ));
                            return Ok(Ended::Refused(hold.transfer, reason));
                        }
                        let action = match end {
                            HoldEnd::Post(amount) => HoldAction::Post(amount.unwrap_or(hold.transfer.amount)),
                            HoldEnd::Void => HoldAction::Void,
                        };
                        let again = match (action, hold.transfer.state) {
                            (HoldAction::Post(amount), HoldState::Posted) => {
                                hold.transfer.posted_amount == Some(amount)
                            }
                            (HoldAction::Void, HoldState::Voided) => true,
                            _ => false,
                        };
                        if again && hold.transfer.pending {
                            return Ok(Ended::Already(hold.transfer));
                        }
                        let (_, mut ended) = end_locked(&mut tx, &[(hold.clone(), Some(action))], now_ms, "api").await?;
                        let ended = match ended.pop() {
                            Some(Ok(transfer)) => Ended::Now(Transfer { ended_by: Some("api".into()), ..transfer }),
                            Some(Err(reason)) => return Ok(Ended::Refused(hold.transfer, reason)),
                            None => return Ok(Ended::NotFound),
                        };
                        tx.commit().await.context("committing a hold's end")?;
                        Ok::<_, StoreError>(ended)
                    })
                }

                async fn settle_holds(&self, now_ms: i64, limit: u32) -> Result<Swept, StoreError> {
                    // Read without locks first (a locking scan would wait
                    // for holds an application has not committed), then
                    // lock what was found and read it again. A hold a sweep
                    // could not end waits FOLLOW_RETRY_MS, then comes after
                    // the others.
                    let due: Vec<String> = sql::query_scalar(
                        "SELECT t.id FROM ledger_transfers t LEFT JOIN operations o ON o.hold_id = t.id \
                         WHERE ((t.state = 'pending' AND (o.status IN ('succeeded', 'failed') OR t.expires_at_ms <= $1)) \
                         OR (t.recheck = 1 AND o.status IN ('succeeded', 'failed'))) \
                         AND (t.follow_tried_at_ms IS NULL OR t.follow_tried_at_ms <= $3) \
                         ORDER BY CASE WHEN t.follow_tried_at_ms IS NULL THEN 0 ELSE 1 END, t.follow_tried_at_ms, t.id \
                         LIMIT $2",
                    )
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .bind(now_ms.saturating_sub(crate::ledger::FOLLOW_RETRY_MS))
                    .fetch_all(self.read_pool())
                    .await
                    .context("finding holds to end")?;
                    if due.is_empty() {
                        return Ok(Swept::default());
                    }
                    let due: Vec<&str> = due.iter().map(String::as_str).collect();
                    crate::error::retry_conflicts!(async {
                        let mut tx = self.begin().await?;
                        lock_transfers(&mut tx, &due).await?;
                        let mut settled = Vec::new();
                        let holds: Vec<(Known, Option<HoldAction>)> = read_transfers(&mut tx, &due)
                            .await?
                            .into_iter()
                            .filter_map(|(hold, status)| {
                                let action = sweep_action(status.as_deref(), &hold.transfer, now_ms);
                                if action.is_none() && matches!(status.as_deref(), Some("succeeded" | "failed")) {
                                    // It agrees with its operation's outcome.
                                    settled.push(hold.transfer.id.clone());
                                }
                                action.map(|action| (hold, Some(action)))
                            })
                            .collect();
                        let (_, ended) = end_locked(&mut tx, &holds, now_ms, "operation").await?;
                        let mut swept = Swept::default();
                        let mut tried = Vec::new();
                        for ((hold, action), result) in holds.iter().zip(ended) {
                            match (result, action) {
                                (Ok(_), Some(HoldAction::Post(_))) => swept.posted += 1,
                                (Ok(_), Some(HoldAction::Void)) => swept.voided += 1,
                                (Ok(_), Some(HoldAction::Expire)) => swept.expired += 1,
                                (Ok(_), Some(HoldAction::Reverse(_))) => swept.reversed += 1,
                                (Ok(_), Some(HoldAction::Repost(_))) => swept.reposted += 1,
                                (Ok(_), None) => {}
                                (Err(reason), _) => {
                                    tried.push(hold.transfer.id.as_str());
                                    swept.refused.push((hold.transfer.id.clone(), reason));
                                }
                            }
                        }
                        if !settled.is_empty() {
                            sql::query(concat!("UPDATE ledger_transfers SET recheck = 0 WHERE id IN ", $ids))
                                .bind(serde_json::to_string(&settled).unwrap_or_default())
                                .execute(&mut *tx)
                                .await
                                .context("clearing holds that agree with their operation")?;
                        }
                        if !tried.is_empty() {
                            sql::query(concat!("UPDATE ledger_transfers SET follow_tried_at_ms = $2 WHERE id IN ", $ids))
                                .bind(serde_json::to_string(&tried).unwrap_or_default())
                                .bind(now_ms)
                                .execute(&mut *tx)
                                .await
                                .context("noting holds that could not follow their operation")?;
                        }
                        tx.commit().await.context("committing holds ended")?;
                        Ok::<_, StoreError>(swept)
                    })
                }

                async fn account(&self, id: &str) -> Result<Option<crate::Account>, StoreError> {
                    let row = sql::query(concat!("SELECT ", crate::ledger::statements::account_columns!(), " FROM ledger_accounts WHERE id = $1"))
                        .bind(id)
                        .fetch_optional(self.read_pool())
                        .await
                        .context("reading an account")?;
                    row.as_ref().map(rows::account_from_row).transpose()
                }

                async fn entries(&self, id: &str, after: i64, limit: u32) -> Result<Vec<Entry>, StoreError> {
                    let rows = sql::query(
                        "SELECT id, account_id, transfer_id, event, posted, debits_pending, credits_pending, \
                         created_at_ms FROM ledger_entries WHERE account_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                    )
                    .bind(id)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(self.read_pool())
                    .await
                    .context("reading the ledger's journal")?;
                    rows.iter().map(rows::entry_from_row).collect()
                }

                async fn accounts(&self, after: &str, limit: u32) -> Result<Vec<crate::Account>, StoreError> {
                    let rows = sql::query(concat!(
                        "SELECT ",
                        crate::ledger::statements::account_columns!(),
                        " FROM ledger_accounts WHERE id > $1 ORDER BY id LIMIT $2"
                    ))
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(self.read_pool())
                    .await
                    .context("listing accounts")?;
                    rows.iter().map(rows::account_from_row).collect()
                }

                async fn pending_holds(&self, limit: u32) -> Result<Vec<Transfer>, StoreError> {
                    let rows = sql::query(concat!(
                        "SELECT ",
                        crate::ledger::statements::transfer_columns!(),
                        "WHERE t.state = 'pending' ORDER BY t.created_at_ms, t.id LIMIT $1"
                    ))
                    .bind(i64::from(limit))
                    .fetch_all(self.read_pool())
                    .await
                    .context("listing pending holds")?;
                    rows.iter().map(|row| rows::transfer_from_row(row).map(|known| known.transfer)).collect()
                }

                async fn transfer_by_id(&self, id: &str) -> Result<Option<Transfer>, StoreError> {
                    let mut conn = self.read_pool().acquire().await.context("reading a transfer")?;
                    Ok(read_transfers(&mut conn, &[id]).await?.pop().map(|(known, _)| known.transfer))
                }

                async fn ledger_stats(&self) -> Result<LedgerStats, StoreError> {
                    let row = sql::query(
                        "SELECT COUNT(*) AS holds, MIN(created_at_ms) AS oldest FROM ledger_transfers \
                         WHERE state = 'pending'",
                    )
                    .fetch_one(self.read_pool())
                    .await
                    .context("reading the ledger's gauges")?;
                    Ok(LedgerStats {
                        holds_pending: crate::operator::rows::OperatorRow::value(&row, "holds")
                            .context("reading the ledger's gauges")?,
                        oldest_hold_at_ms: crate::operator::rows::OperatorRow::value(&row, "oldest")
                            .context("reading the ledger's gauges")?,
                    })
                }
            }

            impl crate::LedgerConnection for $conn {
                async fn apply_transfers(
                    &mut self,
                    batch: &[NewTransfer],
                    now_ms: i64,
                ) -> Result<Vec<TransferResult>, StoreError> {
                    apply_transfers(self, batch, now_ms).await
                }

                async fn tie_hold(&mut self, hold: &str, operation_id: i64) -> Result<(), StoreError> {
                    tie_hold(self, hold, operation_id).await
                }
            }
    };
}

pub(crate) use account_columns;
pub(crate) use ledger_statements;
pub(crate) use transfer_columns;
