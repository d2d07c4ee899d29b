//! The group commit of single transfers ([`Transfers`]): requests that
//! arrive while a batch is being applied wait, and are applied together
//! in the next one, in arrival order, with one
//! [`failwell_store::LedgerStore::transfer`] call (one transaction). So a
//! hot account costs one lock per batch rather than one transaction per
//! request, and the answers are those of the same requests applied one by
//! one in that order (a duplicate in a batch replays the first).
//!
//! It does not wait for more requests before applying a batch: while one
//! batch is in flight the next one gathers on its own.

use std::sync::Arc;

use failwell_store::{NewTransfer, Store, StoreError, TransferResult};
use tokio::sync::{mpsc, oneshot};

/// Transfers applied in one transaction, at most.
pub const TRANSFER_BATCH: usize = 512;
/// Requests waiting for the group commit, at most (senders wait beyond).
const TRANSFER_QUEUE: usize = 4096;

/// Why a transfer sent to [`Transfers`] has no result. Nothing of its
/// batch was applied.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TransferError {
    /// The store failed on the batch (shared by every request of it).
    #[error("applying a batch of transfers failed")]
    Store(#[source] Arc<StoreError>),
    /// The group commit has ended (the process is stopping).
    #[error("the ledger's group commit has stopped")]
    Stopped,
}

type Reply = oneshot::Sender<Result<TransferResult, TransferError>>;

/// The group commit of single transfers: one task applies whatever
/// requests arrived together (at most [`TRANSFER_BATCH`]), one batch at a
/// time, and answers each with its own result. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Transfers {
    queue: mpsc::Sender<(NewTransfer, Reply)>,
}

impl Transfers {
    /// Starts the writer task on `store`; it ends when every handle is
    /// dropped. Results are counted as [`super::apply`] says.
    pub fn start(store: Store) -> Self {
        let (queue, mut waiting) = mpsc::channel::<(NewTransfer, Reply)>(TRANSFER_QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(TRANSFER_BATCH);
            while waiting.recv_many(&mut batch, TRANSFER_BATCH).await > 0 {
                let (transfers, replies): (Vec<_>, Vec<_>) = batch.drain(..).unzip();
                let count = transfers.len();
                match super::apply(&store, transfers).await {
                    Ok(results) => {
                        for (reply, result) in replies.into_iter().zip(results) {
                            let _ = reply.send(Ok(result));
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %crate::chain(&e), count, "applying transfers failed");
                        let e = Arc::new(e);
                        for reply in replies {
                            let _ = reply.send(Err(TransferError::Store(e.clone())));
                        }
                    }
                }
            }
        });
        Self { queue }
    }

    /// Applies `transfer` in one of the next batches and returns its
    /// result once the batch committed. Errors: [`TransferError`] (the
    /// transfer was not applied; sending it again with the same id is
    /// safe).
    pub async fn transfer(&self, transfer: NewTransfer) -> Result<TransferResult, TransferError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((transfer, reply)).await.map_err(|_| TransferError::Stopped)?;
        answer.await.map_err(|_| TransferError::Stopped)?
    }
}
