//! `failwell demo`: the same orders, the same faulty provider, two clients.
//!
//! Starts two provider simulators with the same profile and seed (so both
//! clients meet the same fault schedule per order), starts failwell on a
//! temporary SQLite file, and places every order the way an application
//! would: the order row and its outbox message in **one transaction**. When
//! every operation has its final outcome, the naive client charges the same
//! orders against the second simulator, and both are compared with the
//! provider's own count of effects.
//!
//! Both clients get the orders at the same moments (`--arrival-rate`
//! orders per second), and an order's time to outcome counts from its
//! arrival for both: the naive client's wait for a free call slot counts as
//! failwell's wait in the outbox does (a benchmark that times each call
//! only from its own start hides that wait: coordinated omission).

mod naive;
mod report;
mod shop;
mod wallet;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use failwell_sim::{Effects, Profile, RateLimit, RateScope, SimConfig, Simulator, WebhookTarget};
use failwell_store::prelude::*;
use failwell_store::{Message, Operation, OperationStatus, Outbox, StoreError};
use hdrhistogram::Histogram;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::Instant;

pub use naive::{Belief, NaiveResult};
pub use report::{Figures, Report, WebhookFigures};
pub use wallet::{WALLET_SHARE_PERCENT, WalletFigures, WalletPart};

use crate::config::ConfigError;
use crate::{Server, StartError};

/// Why the demo could not run to its report.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// No temporary directory for the demo's database.
    #[error("cannot create a temporary directory")]
    TempDir(#[source] std::io::Error),
    /// No loopback port for failwell's API.
    #[error("cannot bind the API")]
    BindApi(#[source] std::io::Error),
    /// The API's listener has no local address.
    #[error("cannot read the API's address")]
    ApiAddress(#[source] std::io::Error),
    /// No loopback port for a simulator.
    #[error("cannot bind the simulator")]
    BindSimulator(#[source] std::io::Error),
    /// A simulator could not start.
    #[error("cannot start the simulator")]
    Simulator(#[source] std::io::Error),
    /// The demo's own configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// failwell could not start.
    #[error("cannot start failwell")]
    Start(#[source] StartError),
    /// failwell's store is not the demo's SQLite database.
    #[error("the demo runs on its own SQLite database")]
    NotSqlite,
    /// The shop's `orders` table could not be created.
    #[error("cannot create the demo's orders table")]
    OrdersTable(#[source] sqlx::Error),
    /// An order could not be written (its reference given).
    #[error("cannot insert order {reference}")]
    InsertOrder {
        /// The order's reference.
        reference: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// An order's transaction could not be committed.
    #[error("cannot commit an order")]
    Commit(#[source] sqlx::Error),
    /// The task placing an order panicked or was cancelled.
    #[error("an order's task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A wallet's top-up was refused (its transfer id given).
    #[error("cannot top up a wallet: transfer {id} refused: {reason}")]
    TopUp {
        /// The top-up's transfer id.
        id: String,
        /// Why the ledger refused it.
        reason: failwell_store::TransferRefusal,
    },
}

/// Demo settings.
#[derive(Clone, Debug)]
pub struct DemoArgs {
    /// Orders to place.
    pub orders: usize,
    /// Seed of the orders and of the simulators' fault schedule.
    pub seed: u64,
    /// The simulators' fault profile.
    pub profile: Profile,
    /// Orders arriving per second, for both clients: order `n` arrives
    /// `n / arrival_rate` s after the start, whatever is still in flight
    /// (an open workload), and its time to outcome counts from then.
    pub arrival_rate: u32,
    /// Provider calls in flight at once, for both clients.
    pub concurrency: usize,
    /// The provider's rate limit, requests per second (`None`: only the
    /// profile's random 429s).
    pub rate_limit: Option<u32>,
    /// Each order pays [`WALLET_SHARE_PERCENT`] % from its customer's
    /// wallet (a ledger hold tied to the card charge) and the rest by card.
    pub wallet: bool,
}

/// One order of the demo shop.
#[derive(Clone, Debug)]
pub struct Order {
    /// Our reference, e.g. `order-000042`.
    pub reference: String,
    /// Amount charged to the card, in minor units (cents).
    pub amount: u64,
    /// ISO currency code.
    pub currency: &'static str,
    /// The part paid from the customer's wallet (`--wallet`), on top of
    /// `amount`.
    pub wallet: Option<WalletPart>,
}

/// The per-attempt timeout both clients use, in ms.
const TIMEOUT_MS: u64 = 1_000;
/// Orders placed at once, as a shop's concurrent requests would.
const PLACERS: usize = 16;
/// How long a demo may take before the remaining operations are reported
/// as unknown.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// The secret the demo's provider signs its webhooks with (Stripe scheme).
const WEBHOOK_SECRET: &str = "whsec_failwell_demo";

/// The failwell configuration of the demo, pointing at `base_url`. The
/// orders arrive as one burst, so the retry budget is wider than the
/// default: a budget relative to recent first attempts would otherwise hold
/// the tail of retries, once the burst is over, to its floor per second.
/// For the same reason the breaker's failure rate is taken over the last
/// 10 s rather than the last 50 calls: at hundreds of calls a second, 50
/// calls are a few tens of milliseconds, and once the burst is over they
/// are the calls that ended last, which are the ones that timed out.
fn demo_config(base_url: &str, database_url: &str, concurrency: usize) -> String {
    let settings = format!(
        "connect_timeout_ms = 500\ntimeout_ms = {TIMEOUT_MS}\nmax_attempts = 10\ndeadline_ms = 300000\n\
         max_retry_after_ms = 30000\nreconcile_after_ms = 500\n\
         backoff = {{ base_ms = 100, cap_ms = 3000, jitter = \"full\" }}\n\
         breaker = {{ open_ms = 1000, max_open_ms = 5000, window = \"time\", window_ms = 10000 }}\n\
         bulkhead = {{ max_concurrent = {concurrency} }}\n\
         retry_budget = {{ ratio = 0.5, min_per_second = 100 }}"
    );
    format!(
        r#"
database_url = "{database_url}"
sqlite_synchronous = "full"
listen = "127.0.0.1:0"

[relay]
concurrency = {concurrency}
batch_size = {concurrency}
poll_interval_ms = 50
lease_ms = 30000

[reconciler]
interval_ms = 100
batch_size = 64

[webhooks.sim]
scheme = "stripe"
secrets = ["{WEBHOOK_SECRET}"]
ledger = {{ provider = "payments", reference_pointer = "/data/object/reference", status_pointer = "/data/object/status", version_pointer = "/data/object/version" }}

{provider}# The charge's manifest: its answers to the four questions.
on_unavailable = "queue"
duplicate_severity = "money"
disagreement = {{ reconcile = "list_by_reference" }}
retry_owner = "failwell"
idempotency = "key_header"
"#,
        provider = simulator_provider(base_url, &settings)
    )
}

/// The `[providers.payments]` configuration for the provider simulator at
/// `base_url`: its `charge` operation (form-encoded, reference in
/// `reference`), its status lookup by reference and its permanent
/// `card_declined`. `settings` are further `key = value` lines of the
/// section (timeouts, attempts, `backoff = {…}`, …).
pub fn simulator_provider(base_url: &str, settings: &str) -> String {
    format!(
        r#"[providers.payments]
base_url = "{base_url}"
idempotency_header = "Idempotency-Key"
classify = {{ codes = {{ card_declined = "permanent" }} }}
{settings}

[providers.payments.lookup]
path = "/v1/charges"
query_param = "reference"
list_pointer = "/data"
status_pointer = "/status"
succeeded = ["succeeded"]
failed = ["failed"]

[providers.payments.operations.charge]
method = "POST"
path = "/v1/charges"
encoding = "form"
reference_field = "reference"
"#
    )
}

/// When order `n` (0-based) arrives, after the start, at `rate` orders per
/// second (at least 1).
pub fn arrival(n: usize, rate: u32) -> Duration {
    Duration::from_secs_f64(n as f64 / f64::from(rate.max(1)))
}

/// The demo's orders: deterministic in `seed`. With `wallet`, each
/// order's total is split into a wallet part and a card amount.
pub fn orders(count: usize, seed: u64, wallet: bool) -> Vec<Order> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let total = rng.random_range(100..100_000);
            let (wallet, amount) = match wallet {
                true => {
                    let (part, card) = wallet::split(i, total);
                    (Some(part), card)
                }
                false => (None, total),
            };
            Order { reference: format!("order-{i:06}"), amount, currency: "eur", wallet }
        })
        .collect()
}

/// A simulator; `webhooks_to` is failwell's address for the provider's
/// signed webhooks (none for the naive client).
async fn simulator(args: &DemoArgs, webhooks_to: Option<SocketAddr>) -> Result<Simulator, DemoError> {
    let mut config = SimConfig::new(args.profile, args.seed);
    config.rate_limit = args.rate_limit.map(|per_second| RateLimit { per_second, scope: RateScope::Global });
    config.webhooks = webhooks_to.map(|addr| WebhookTarget {
        url: format!("http://{addr}/webhooks/sim"),
        secret: WEBHOOK_SECRET.into(),
    });
    // Long enough that every client times out first, short enough to free sockets.
    config.hang = Duration::from_millis(TIMEOUT_MS * 5);
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(DemoError::BindSimulator)?;
    Simulator::start(config, listener).await.map_err(DemoError::Simulator)
}

fn bar(multi: &MultiProgress, len: usize, label: &'static str) -> ProgressBar {
    let bar = multi.add(ProgressBar::new(len as u64));
    let style = ProgressStyle::with_template("{prefix:<26} [{bar:40}] {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label);
    bar
}

/// Runs the demo and returns the report. Errors: see [`DemoError`]; a
/// demo whose operations do not all settle still reports (them as unknown).
pub async fn run(args: DemoArgs) -> Result<Report, DemoError> {
    let orders = orders(args.orders, args.seed, args.wallet);
    let dir = tempfile::tempdir().map_err(DemoError::TempDir)?;
    let database_url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(DemoError::BindApi)?;
    let api = listener.local_addr().map_err(DemoError::ApiAddress)?;
    let sim_failwell = simulator(&args, Some(api)).await?;
    let limit = args.rate_limit.map_or(String::new(), |n| format!(", at most {n} requests/s"));
    eprintln!(
        "failwell demo: {} orders, profile {}{limit}, seed {}; both clients time out after {TIMEOUT_MS} ms; \
         the provider also sends failwell signed webhooks (duplicated, reordered, delayed)",
        args.orders, args.profile, args.seed
    );
    if args.wallet {
        eprintln!(
            "each order pays {WALLET_SHARE_PERCENT} % from its customer's wallet (a hold tied to the card \
             charge, made in the order's transaction) and the rest by card"
        );
    }
    let config =
        crate::config::from_toml(&demo_config(&sim_failwell.base_url(), &database_url, args.concurrency))?;
    let server = Server::start(config, listener).await.map_err(DemoError::Start)?;
    let multi = MultiProgress::new();
    let placed = bar(&multi, orders.len(), "failwell: orders placed");
    let settled = bar(&multi, orders.len(), "failwell: outcomes final");
    let naive_bar = bar(&multi, orders.len(), "naive client: done");

    let start = Instant::now();
    let start_ms = failwell_engine::now_ms();
    let Some(store) = server.store().backend::<failwell_store::SqliteStore>().cloned() else {
        return Err(DemoError::NotSqlite);
    };
    shop::create_orders(&store).await.map_err(DemoError::OrdersTable)?;
    if args.wallet {
        wallet::open(&store, &orders, start_ms).await?;
    }
    place_all(&store, &orders, (start, args.arrival_rate), &placed).await?;
    placed.finish();
    let placing = start.elapsed();
    eprintln!(
        "placed {} orders in {:.2} s ({:.0} orders/s, arriving at {}/s), each order row and its outbox message \
         in one transaction",
        orders.len(),
        placing.as_secs_f64(),
        orders.len() as f64 / placing.as_secs_f64(),
        args.arrival_rate
    );
    loop {
        let counts = store.counts().await?;
        settled.set_position(counts.succeeded + counts.failed);
        settled.set_message(format!("{} unknown, {} pending", counts.unknown, counts.pending));
        if counts.pending + counts.unknown == 0 || start.elapsed() > SETTLE_LIMIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failwell_elapsed = start.elapsed();
    settled.finish();
    // The last webhooks may still be on their way (delayed, redelivered).
    if !sim_failwell.wait_webhooks(Duration::from_secs(60)).await {
        eprintln!("some webhooks were still in flight after 60 s");
    }
    let counts = store.counts().await?;
    let wallet = match args.wallet {
        true => {
            wallet::follow(&store).await?;
            Some(wallet::figures(&store, &orders, &sim_failwell.effects()).await?)
        }
        false => None,
    };
    let mut operations = Vec::with_capacity(orders.len());
    let mut to_outcome_ms = Vec::with_capacity(orders.len());
    for (n, order) in orders.iter().enumerate() {
        let op = store.operation(&order.reference).await?;
        if let Some(op) = &op
            && let Some(at_ms) = outcome_at(&store, op).await?
        {
            let arrived_ms = start_ms + arrival(n, args.arrival_rate).as_millis() as i64;
            to_outcome_ms.push((at_ms - arrived_ms).max(0) as u64);
        }
        operations.push((order, op));
    }
    let paused = server.providers().values().map(|c| c.guards().paused_total()).sum::<Duration>();
    server.shutdown().await;
    let effects = sim_failwell.effects();
    let mut failwell = failwell_figures(&operations, &effects, counts.attempts, failwell_elapsed);
    failwell.p95_ms = p95(to_outcome_ms.into_iter());
    failwell.paused_s = paused.as_secs_f64();
    let accepted = effects.webhooks.deliveries.saturating_sub(effects.webhooks.refused);
    let webhooks = WebhookFigures {
        sent: effects.webhooks.events,
        deliveries: accepted,
        received: counts.inbox_events,
        duplicates_absorbed: accepted.saturating_sub(counts.inbox_events),
        resolved_by_webhook: counts.resolved_by_events,
    };

    // Started now, so an outage window hits the naive client as it hit failwell.
    let sim_naive = simulator(&args, None).await?;
    let start = Instant::now();
    let tick = naive_bar.clone();
    let results = naive::run(
        &sim_naive.base_url(),
        &orders,
        args.arrival_rate,
        args.concurrency,
        Duration::from_millis(TIMEOUT_MS),
        move || tick.inc(1),
    )
    .await;
    let naive = naive_figures(&results, &sim_naive.effects(), start.elapsed());
    naive_bar.finish();
    sim_failwell.shutdown().await;
    sim_naive.shutdown().await;
    Ok(Report { failwell, naive, webhooks, wallet })
}

/// Places every order when it arrives ([`arrival`] after `start`, at
/// `arrival_rate`),
/// at most [`PLACERS`] at a time, each order row and its message in a
/// transaction of its own, as a shop's requests do. An order that arrives
/// while every placer is busy waits for one (and its time to outcome
/// counts that wait).
async fn place_all(
    store: &failwell_store::SqliteStore,
    orders: &[Order],
    (start, arrival_rate): (Instant, u32),
    placed: &ProgressBar,
) -> Result<(), DemoError> {
    let mut placing = tokio::task::JoinSet::new();
    for (n, order) in orders.iter().enumerate() {
        tokio::time::sleep_until(start + arrival(n, arrival_rate)).await;
        while let Some(done) = placing.try_join_next() {
            done.map_err(DemoError::Task)??;
            placed.inc(1);
        }
        if placing.len() >= PLACERS
            && let Some(done) = placing.join_next().await
        {
            done.map_err(DemoError::Task)??;
            placed.inc(1);
        }
        let (store, order) = (store.clone(), order.clone());
        placing.spawn(async move { place(&store, &order).await });
    }
    while let Some(done) = placing.join_next().await {
        done.map_err(DemoError::Task)??;
        placed.inc(1);
    }
    Ok(())
}

/// Writes one order and its outbox message in one transaction.
async fn place(store: &failwell_store::SqliteStore, order: &Order) -> Result<(), DemoError> {
    let now = failwell_engine::now_ms();
    let mut tx = store.begin().await?;
    shop::insert_order(&mut tx, order, now)
        .await
        .map_err(|source| DemoError::InsertOrder { reference: order.reference.clone(), source })?;
    let message = Message {
        idempotency_key: Some(order.reference.clone()),
        reference: Some(order.reference.clone()),
        hold: wallet::hold(order),
        ..Message::new(
            "payments",
            "charge",
            json!({"amount": order.amount, "currency": order.currency, "reference": order.reference}),
        )
    };
    Outbox::enqueue(&mut tx, &message, now).await?;
    tx.commit().await.map_err(DemoError::Commit)?;
    Ok(())
}

fn effects_of(effects: &Effects, reference: &str) -> u64 {
    effects.by_reference.get(reference).map_or(0, |r| r.effects)
}

fn p95(latencies_ms: impl Iterator<Item = u64>) -> u64 {
    // 3 significant figures is always a valid precision.
    let mut histogram = Histogram::<u64>::new(3).expect("valid histogram precision");
    for ms in latencies_ms {
        let _ = histogram.record(ms.max(1));
    }
    histogram.value_at_quantile(0.95)
}

fn failwell_figures(
    operations: &[(&Order, Option<Operation>)],
    effects: &Effects,
    attempts: u64,
    elapsed: Duration,
) -> Figures {
    let mut f = Figures {
        intents: operations.len() as u64,
        provider_effects: effects.charges,
        double_effects: effects.double_effects(),
        attempts,
        rate_limited: effects.rate_limited,
        elapsed_s: elapsed.as_secs_f64(),
        ..Figures::default()
    };
    for (order, op) in operations {
        let charged = effects_of(effects, &order.reference);
        let Some(op) = op else {
            f.lost += 1;
            continue;
        };
        match op.status {
            OperationStatus::Succeeded if charged == 0 => f.lost += 1,
            OperationStatus::Succeeded => {}
            // Reported failed although the provider charged: the record is wrong.
            OperationStatus::Failed if charged > 0 => f.lost += 1,
            OperationStatus::Failed if op.dead_letter => f.dead_letters += 1,
            OperationStatus::Failed => f.declined += 1,
            OperationStatus::Pending | OperationStatus::Unknown | OperationStatus::NeedsHuman => {
                f.unknown_remaining += 1
            }
        }
    }
    f
}

/// When `op` took the final status it has (ms since the Unix epoch): the
/// last change of its status to it in its history; `None` while it is not
/// final. A later event that only confirms the outcome touches the row
/// (`updated_at_ms`), not the moment the outcome was known.
async fn outcome_at(store: &failwell_store::SqliteStore, op: &Operation) -> Result<Option<i64>, StoreError> {
    if !op.status.is_terminal() {
        return Ok(None);
    }
    let to = format!("-> {}", op.status.as_str());
    let history = store.history(op.id).await?;
    Ok(history.iter().rev().find(|e| e.subject == "operation" && e.change.ends_with(&to)).map(|e| e.at_ms))
}

fn naive_figures(results: &[NaiveResult], effects: &Effects, elapsed: Duration) -> Figures {
    let mut f = Figures {
        intents: results.len() as u64,
        provider_effects: effects.charges,
        double_effects: effects.double_effects(),
        attempts: results.iter().map(|r| u64::from(r.attempts)).sum(),
        rate_limited: effects.rate_limited,
        elapsed_s: elapsed.as_secs_f64(),
        ..Figures::default()
    };
    let by_reference: BTreeMap<&str, &NaiveResult> =
        results.iter().map(|r| (r.reference.as_str(), r)).collect();
    for (reference, result) in by_reference {
        let charged = effects_of(effects, reference);
        match result.belief {
            Belief::Charged if charged == 0 => f.lost += 1,
            Belief::Charged => {}
            Belief::Declined if charged > 0 => f.lost += 1,
            Belief::Declined => f.declined += 1,
            Belief::GaveUp if charged == 0 => f.lost += 1,
            Belief::GaveUp => f.unknown_remaining += 1,
        }
    }
    f.p95_ms = p95(results.iter().map(|r| r.latency.as_millis() as u64));
    f
}
