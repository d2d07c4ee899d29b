//! The operator commands: `failwell status`, `failwell dlq …`, `failwell
//! reconcile run`, `failwell ops show` and `failwell ledger …` (in
//! `cli/ledger.rs`). Each opens the database of the
//! given configuration directly (beside a running `failwell serve`, or
//! without one), does what [`crate::ops`] does for the admin API, and prints
//! a table, or JSON with `--json`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use failwell_policy::Outcome;
use failwell_store::{Channel, Database, DeadLetterFilter, DeadLetterKind, Store, StoreError};
use serde::Serialize;

use crate::config::{Config, ConfigError};
use crate::ops::{self, OpsError};

pub mod ledger;

/// Why an operator command failed (its exit status is then 2; "not found"
/// answers are an exit status of 1, not an error).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The SQLite file `database_url` names does not exist (its path given).
    #[error(
        "there is no database at {0:?} (database_url); is this the configuration `failwell serve` runs with?"
    )]
    NoDatabase(String),
    /// The database could not be opened.
    #[error("cannot open the database (database_url)")]
    Open(#[source] StoreError),
    /// The database holds no failwell store: an operator command never
    /// creates one.
    #[error(
        "the database (database_url) holds no failwell store; is this the configuration `failwell serve` runs \
         with? (`failwell serve` creates the store)"
    )]
    NoStore,
    /// `ops resolve --note` is blank.
    #[error("--note must say why (it is kept in the history)")]
    BlankNote,
    /// The store failed during the command.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A reconciliation failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// A provider's client could not be built.
    #[error("cannot build the providers' clients")]
    Clients(#[source] failwell_engine::ClientError),
    /// The ledger refused a `failwell ledger` command: nothing was written.
    #[error(transparent)]
    Ledger(Box<ledger::LedgerRefused>),
    /// The answer could not be written as JSON.
    #[error("cannot write the answer as JSON")]
    Json(#[from] serde_json::Error),
}

impl From<ledger::LedgerRefused> for CliError {
    fn from(refused: ledger::LedgerRefused) -> Self {
        Self::Ledger(Box::new(refused))
    }
}

/// Where the configuration comes from, and the output format.
#[derive(Debug, Args)]
pub struct Common {
    /// Configuration file (TOML); FAILWELL_* environment variables override it.
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `failwell dlq …`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, newest first.
    List {
        /// Only `message` (calls to providers) or `forward` (webhook forwards).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<DeadLetterKind>,
        /// Only this provider or webhook integration.
        #[arg(long)]
        integration: Option<String>,
        /// At most this many (1 or more).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Show one dead letter with its payload.
    Show {
        /// `message` or `forward`.
        #[arg(value_parser = parse_kind)]
        kind: DeadLetterKind,
        /// Its id (from `dlq list`).
        id: i64,
    },
    /// Put a dead letter back in its queue, due now, with fresh attempts and
    /// the same idempotency key.
    Replay {
        /// `message` or `forward`.
        #[arg(value_parser = parse_kind)]
        kind: DeadLetterKind,
        /// Its id.
        id: i64,
    },
    /// Delete a dead letter for good (the history keeps that you did).
    Purge {
        /// `message` or `forward`.
        #[arg(value_parser = parse_kind)]
        kind: DeadLetterKind,
        /// Its id.
        id: i64,
    },
    /// Record that you have looked at the dead letters: "dead letters since
    /// the last look" starts again from zero.
    Ack,
}

/// `failwell reconcile run` options.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Compare only this provider (default: every provider with [compare]).
    #[arg(long)]
    pub provider: Option<String>,
    /// How far back the comparison looks, e.g. 24h, 90m, 7d.
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    pub window: Duration,
}

/// `failwell ops resolve` options.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The operation's idempotency key.
    pub key: String,
    /// What the provider says happened.
    #[arg(long = "as", value_parser = parse_outcome)]
    pub outcome: Outcome,
    /// The provider's id for the effect (e.g. the charge id), if it has one.
    #[arg(long)]
    pub provider_ref: Option<String>,
    /// Why (kept in the history), e.g. "checked in the provider's dashboard".
    #[arg(long)]
    pub note: String,
}

fn parse_outcome(s: &str) -> Result<Outcome, String> {
    match s {
        "succeeded" => Ok(Outcome::Succeeded),
        "failed" => Ok(Outcome::Failed),
        _ => Err(format!("{s:?}: succeeded or failed")),
    }
}

fn parse_kind(s: &str) -> Result<DeadLetterKind, String> {
    DeadLetterKind::parse(s).ok_or_else(|| format!("{s:?} is not a dead-letter kind: message or forward"))
}

/// Opens the configuration's database for an operator command. Errors: the
/// configuration is invalid, the database (SQLite: its file) does not
/// exist, or it holds no failwell store: an operator command never creates
/// one.
pub async fn open(common: &Common) -> Result<(Config, Store), CliError> {
    let config = crate::config::load(common.config.as_deref())?;
    let url = &config.database_url;
    if Database::of(url) == Some(Database::Sqlite) {
        let path = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
        let path = path.split('?').next().unwrap_or(path);
        if path != ":memory:" && !std::path::Path::new(path).exists() {
            return Err(CliError::NoDatabase(path.to_owned()));
        }
    }
    let holds = Store::holds_store(url).await.map_err(CliError::Open)?;
    if !holds {
        return Err(CliError::NoStore);
    }
    let store = Store::open(url, config.store_options()).await.map_err(CliError::Open)?;
    Ok((config, store))
}

fn print<T: Serialize>(json: bool, value: &T, text: impl FnOnce() -> String) -> Result<(), CliError> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", text());
    }
    Ok(())
}

/// `failwell status`.
pub async fn status(common: Common) -> Result<ExitCode, CliError> {
    let (config, store) = open(&common).await?;
    let stats = ops::stats(&store, &config.providers, config.stats_window).await?;
    print(common.json, &stats, || ops::status_table(&stats))?;
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// `failwell dlq …`: exit 1 when the dead letter named does not exist.
pub async fn dlq(common: Common, command: DlqCommand) -> Result<ExitCode, CliError> {
    let (_, store) = open(&common).await?;
    let missing = |kind: DeadLetterKind, id: i64| {
        eprintln!("{} {id} is not a dead letter", kind.as_str());
        ExitCode::from(1)
    };
    let code = match command {
        DlqCommand::List { kind, integration, limit } => {
            let filter = DeadLetterFilter { kind, integration, since_ms: None };
            let mut letters = store.dead_letters(filter, limit.saturating_add(1)).await?;
            let more = letters.len() > limit as usize;
            letters.truncate(limit as usize);
            print(common.json, &letters, || ops::dead_letter_table(&letters))?;
            if more {
                eprintln!(
                    "more dead letters than --limit {limit} are not shown (`failwell status` counts them all)"
                );
            }
            ExitCode::SUCCESS
        }
        DlqCommand::Show { kind, id } => match store.dead_letter(kind, id).await? {
            Some(letter) => {
                // The payload is shown in full either way.
                println!("{}", serde_json::to_string_pretty(&letter)?);
                ExitCode::SUCCESS
            }
            None => missing(kind, id),
        },
        DlqCommand::Replay { kind, id } => {
            if done(ops::replay(&store, kind, id, Channel::Cli).await)? {
                let done = serde_json::json!({ "kind": kind.as_str(), "id": id, "replayed": true });
                print(common.json, &done, || {
                    format!(
                        "{} {id} replayed: due now with fresh attempts (a running failwell picks it up)\n",
                        kind.as_str()
                    )
                })?;
                ExitCode::SUCCESS
            } else {
                missing(kind, id)
            }
        }
        DlqCommand::Purge { kind, id } => {
            if done(ops::purge(&store, kind, id, Channel::Cli).await)? {
                let done = serde_json::json!({ "kind": kind.as_str(), "id": id, "purged": true });
                print(common.json, &done, || format!("{} {id} purged\n", kind.as_str()))?;
                ExitCode::SUCCESS
            } else {
                missing(kind, id)
            }
        }
        DlqCommand::Ack => {
            let now = ops::acknowledge(&store, Channel::Cli).await?;
            print(common.json, &serde_json::json!({ "acknowledged_at_ms": now }), || {
                format!("dead letters acknowledged at {}\n", failwell_engine::compare::rfc3339(now))
            })?;
            ExitCode::SUCCESS
        }
    };
    store.close().await;
    Ok(code)
}

/// `failwell reconcile run`: exit 1 when a comparison found discrepancies
/// or unknown operations are left.
pub async fn reconcile(common: Common, args: ReconcileArgs) -> Result<ExitCode, CliError> {
    let (config, store) = open(&common).await?;
    let sink = config.alerts.as_ref().map(|a| a.sink.clone());
    let (providers, _) =
        crate::clients(&config.providers, &config.forwards, None).map_err(CliError::Clients)?;
    let providers = Arc::new(providers);
    let run = ops::reconcile_run(
        &store,
        &providers,
        sink.as_ref(),
        args.provider.as_deref(),
        args.window,
        Channel::Cli,
    )
    .await?;
    print(common.json, &run, || {
        let mut text = format!(
            "looked up {} unknown operations; {} still unknown, {} waiting for a human\n",
            run.looked_up, run.still_unknown, run.needs_human
        );
        for c in &run.comparisons {
            text.push_str(&format!("report {} (alert: {}): {}", c.report_id, c.alert, c.text));
        }
        text
    })?;
    store.close().await;
    let clean = run.still_unknown == 0 && run.comparisons.iter().all(|c| c.discrepancies == 0);
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `failwell ops show KEY`: exit 1 when no operation has the key.
pub async fn show(common: Common, key: String) -> Result<ExitCode, CliError> {
    let (_, store) = open(&common).await?;
    let found = ops::timeline(&store, &key).await?;
    store.close().await;
    let Some((operation, history)) = found else {
        eprintln!("no operation has the idempotency key {key:?}");
        return Ok(ExitCode::from(1));
    };
    print(common.json, &serde_json::json!({ "operation": operation, "history": history }), || {
        ops::timeline_text(&operation, &history)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `failwell ops resolve`: exit 1 when no operation has the key or it is
/// not `unknown` / `needs_human`.
pub async fn resolve(common: Common, args: ResolveArgs) -> Result<ExitCode, CliError> {
    if args.note.trim().is_empty() {
        return Err(CliError::BlankNote);
    }
    let (_, store) = open(&common).await?;
    let done =
        ops::resolve(&store, &args.key, args.outcome, args.provider_ref, args.note, Channel::Cli).await;
    store.close().await;
    Ok(match done {
        Ok(()) => {
            let done = serde_json::json!({ "key": args.key, "status": args.outcome.to_string() });
            print(common.json, &done, || format!("{} is now {}\n", args.key, args.outcome))?;
            ExitCode::SUCCESS
        }
        Err(e @ ops::OpsError::NoOperation(_)) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
        Err(ops::OpsError::NotOpen(status)) => {
            eprintln!(
                "{} is {}: only unknown and needs_human operations are resolved by hand",
                args.key,
                status.as_str()
            );
            ExitCode::from(1)
        }
        Err(e) => return Err(e.into()),
    })
}

/// Whether a dead-letter action was done: `false` when `(kind, id)` is not
/// a dead letter (the command then says so and exits 1).
fn done(action: Result<(), ops::OpsError>) -> Result<bool, ops::OpsError> {
    match action {
        Ok(()) => Ok(true),
        Err(ops::OpsError::NotADeadLetter { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}
