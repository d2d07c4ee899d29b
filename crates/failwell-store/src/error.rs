//! The store's error type. Database causes are kept as `#[source]`, never
//! flattened into strings.

/// Errors from a [`crate::Store`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The idempotency key is already used by a different request
    /// (provider, operation or payload differ). Nothing was written.
    #[error("idempotency key {key:?} was already used with a different request")]
    KeyReused {
        /// The reused key.
        key: String,
    },
    /// The business reference is already used by another operation of the
    /// same provider (status lookups could not tell them apart). Nothing was
    /// written.
    #[error("reference {reference:?} already belongs to another operation of this provider")]
    ReferenceReused {
        /// The reused reference.
        reference: String,
    },
    /// A message given to [`crate::Outbox::enqueue`] has an empty or blank
    /// provider, operation, idempotency key or reference. Nothing was
    /// written.
    #[error("outbox message: {field} must not be empty or blank")]
    InvalidMessage {
        /// `provider`, `operation`, `idempotency_key` or `reference`.
        field: &'static str,
    },
    /// A payload given to [`crate::Outbox::enqueue`] or
    /// [`crate::OutboxStore::submit`] that failwell could not store and read back
    /// on every store: it nests arrays and objects deeper than 127 levels
    /// (the outermost counting as 1), or a string or key holds U+0000
    /// (PostgreSQL's `jsonb` cannot). Nothing was written.
    #[error("payload {reason}")]
    InvalidPayload {
        /// What is wrong, e.g. `nests arrays and objects 130 levels deep; at most 127`.
        reason: String,
    },
    /// An account given to [`crate::LedgerStore::open_account`] has an id
    /// or unit out of form. Nothing was written.
    #[error("ledger account: {0}")]
    InvalidAccount(String),
    /// The hold of an operation submitted with one was refused (e.g.
    /// insufficient funds): neither the hold nor the operation was
    /// written.
    #[error("hold refused: {0}")]
    HoldRefused(crate::TransferRefusal),
    /// A dead letter's operation has a hold that is no longer pending (its
    /// failure voided it): replaying it would take effect without the
    /// hold. Nothing was changed.
    #[error(
        "the operation's hold {hold:?} is {state}: a replay would take effect without it; submit a new operation \
         with a new hold instead"
    )]
    HoldEnded {
        /// The hold's transfer id.
        hold: String,
        /// `posted`, `voided` or `expired`.
        state: String,
    },
    /// The database could not be opened or a statement failed.
    #[error("database error: {context}")]
    Database {
        /// What failwell was doing.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// `database_url` names neither `sqlite:` nor `postgres:`/`postgresql:`.
    #[error(
        "unsupported database URL: expected sqlite://PATH, postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB"
    )]
    UnsupportedUrl,
    /// No schema of the PostgreSQL connection's `search_path` exists, so
    /// there is nowhere to create the tables. Nothing was written.
    #[error(
        "no schema of the connection's search_path exists: create it first (e.g. CREATE SCHEMA failwell) or \
         name an existing one in database_url (?options=-csearch_path%3DSCHEMA)"
    )]
    NoSchema,
    /// A MySQL URL names no database (`mysql://USER@HOST:PORT/` or none
    /// after the port), so there is nowhere to create the tables. Nothing
    /// was written.
    #[error(
        "the MySQL URL names no database: name the one failwell keeps its tables in \
         (mysql://USER@HOST:PORT/DB), created first with CREATE DATABASE"
    )]
    NoDatabase,
    /// Applying the schema migrations failed.
    #[error("database migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A stored value could not be read back (e.g. invalid JSON in a payload
    /// column written by another program).
    #[error("stored {what} is invalid: {detail}")]
    Corrupt {
        /// Which value.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

impl StoreError {
    /// Whether a statement broke a unique constraint (e.g. two
    /// transactions made a transfer with one id at the same time; the
    /// later one, run again, finds the earlier's).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Self::Database { source: sqlx::Error::Database(e), .. }
            if e.kind() == sqlx::error::ErrorKind::UniqueViolation)
    }

    /// Whether the database rolled the transaction back because it
    /// conflicted with another one (SQLSTATE `40001`: a deadlock on MySQL,
    /// a serialization failure on PostgreSQL; `40P01`: a deadlock on
    /// PostgreSQL): the same transaction run again may succeed.
    pub fn is_conflict(&self) -> bool {
        match self {
            Self::Database { source: sqlx::Error::Database(e), .. } => {
                matches!(e.code().as_deref(), Some("40001" | "40P01"))
            }
            _ => false,
        }
    }
}

/// How often a transaction a conflict rolled back is run again
/// ([`retry_conflicts!`]) before its error is returned.
pub(crate) const CONFLICT_RETRIES: u32 = 4;

/// Awaits `$transaction` (an `async` block that runs one transaction and
/// returns `Result<_, StoreError>`), and runs it again while it fails with
/// a conflict ([`StoreError::is_conflict`]), at most
/// [`CONFLICT_RETRIES`] times more: two writers that lock the same rows
/// in different orders (a claim and the results of another, say) lose one
/// transaction to the database's deadlock detection, which the next run
/// wins.
macro_rules! retry_conflicts {
    ($transaction:expr) => {{
        let mut retries = 0;
        loop {
            match $transaction.await {
                Err(e) if e.is_conflict() && retries < crate::error::CONFLICT_RETRIES => retries += 1,
                done => break done,
            }
        }
    }};
}

pub(crate) use retry_conflicts;

/// Attaches a context phrase to a driver error.
pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn context(self, context: &'static str) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Database { context, source })
    }
}
