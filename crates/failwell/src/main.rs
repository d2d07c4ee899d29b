//! The `failwell` command: `serve`, `sim`, `demo`, `webhook verify`. A thin layer over the
//! library; errors are printed with their causes and mapped to exit codes.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use failwell::demo::{self, DemoArgs};
use failwell_sim::{Profile, RateLimit, RateScope, SimConfig, WebhookTarget};
use tokio::net::TcpListener;

/// Integrations that fail well: no double charges, no lost events, no
/// cascading outages.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written to stderr: `text` (coloured only when
    /// stderr is a terminal) or `json` (one object per line, for log
    /// shippers). Which lines: `RUST_LOG` (e.g. `failwell=debug,warn`).
    #[arg(long, global = true, env = "FAILWELL_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// The `--log-format` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the relay, the reconciler and the HTTP API.
    Serve {
        /// Configuration file (TOML); FAILWELL_* environment variables override it.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Check a configuration and print its store (which database, whether it
    /// is reachable and migrated, the rights the application's and failwell's
    /// database users need) and, per operation, its manifest and the
    /// behaviour that follows (exit 2 when a rule refuses it).
    Check {
        /// Configuration file (TOML); FAILWELL_* environment variables override it.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Run the provider simulator (a Stripe-like payments API with faults).
    Sim {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: String,
        /// Fault profile: calm, stormy or outage.
        #[arg(long, default_value = "stormy")]
        profile: Profile,
        /// Seed of the fault schedule.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How long an idempotency key is remembered, in ms.
        #[arg(long, default_value_t = 86_400_000)]
        key_ttl_ms: u64,
        /// Send Stripe-signed webhooks (charge.pending, charge.succeeded,
        /// charge.failed) to this URL, e.g. http://127.0.0.1:8080/webhooks/sim.
        #[arg(long, requires = "webhook_secret")]
        webhook_url: Option<String>,
        /// The secret the webhooks are signed with (Stripe scheme, e.g. whsec_...).
        #[arg(long, requires = "webhook_url")]
        webhook_secret: Option<String>,
        /// Rate-limit mode: requests over this many per second get 429 with
        /// Retry-After (besides the profile's random 429s).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rate_limit: Option<u32>,
        /// With --rate-limit: one limit per value of this request header
        /// (e.g. authorization) instead of one for all requests.
        #[arg(long, requires = "rate_limit", value_parser = header_name)]
        rate_limit_by: Option<String>,
    },
    /// Deliver N orders through a faulty provider with failwell and with a
    /// naive client, and compare.
    Demo {
        /// Number of orders.
        #[arg(long, default_value_t = 1000)]
        orders: usize,
        /// Seed of the orders and of the fault schedule.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Fault profile: calm, stormy or outage.
        #[arg(long, default_value = "stormy")]
        profile: Profile,
        /// Write the report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Orders arriving per second (both clients get the same orders at
        /// the same moments; time to outcome counts from each arrival).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        arrival_rate: u32,
        /// Provider calls in flight at once (both clients).
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The provider also limits requests to this many per second (429
        /// with Retry-After), for both clients.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rate_limit: Option<u32>,
        /// Each order pays 30 % from its customer's wallet (a ledger hold
        /// that follows the card charge) and the rest by card.
        #[arg(long)]
        wallet: bool,
    },
    /// Print the OpenAPI 3.1 document of the HTTP API (what `GET
    /// /openapi.json` serves; docs/openapi.json holds it).
    Openapi,
    /// Webhook tools.
    Webhook {
        #[command(subcommand)]
        command: WebhookCommand,
    },
    /// Each integration's four numbers: success rate, p95 latency, open
    /// entries and the oldest one's age, dead letters since the last look.
    Status {
        #[command(flatten)]
        common: failwell::cli::Common,
    },
    /// Dead letters: list, show, replay, purge, acknowledge.
    Dlq {
        #[command(flatten)]
        common: failwell::cli::Common,
        #[command(subcommand)]
        command: failwell::cli::DlqCommand,
    },
    /// Reconciliation: look up every unknown operation now and compare our
    /// operations with each provider's records.
    Reconcile {
        #[command(flatten)]
        common: failwell::cli::Common,
        #[command(subcommand)]
        command: ReconcileCommand,
    },
    /// Operations: the history of one.
    Ops {
        #[command(flatten)]
        common: failwell::cli::Common,
        #[command(subcommand)]
        command: OpsCommand,
    },
    /// The balance ledger: open accounts, make transfers and holds, post
    /// and void holds, read accounts, journals and holds (docs/LEDGER.md).
    Ledger {
        #[command(flatten)]
        common: failwell::cli::Common,
        #[command(subcommand)]
        command: failwell::cli::ledger::LedgerCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ReconcileCommand {
    /// Run now (exit 1 when discrepancies were found or unknowns are left).
    Run(failwell::cli::ReconcileArgs),
}

#[derive(Debug, Subcommand)]
enum OpsCommand {
    /// Print an operation's timeline: every state change (who, when, why),
    /// attempt, webhook event and discrepancy.
    Show {
        /// The operation's idempotency key.
        key: String,
    },
    /// Settle an operation failwell cannot find out about (`unknown` or
    /// `needs_human`) after checking with the provider.
    Resolve(failwell::cli::ResolveArgs),
}

#[derive(Debug, Subcommand)]
enum WebhookCommand {
    /// Check a delivery's signature (body on stdin, as raw bytes): exit 0
    /// and `valid`, or exit 1 and the reason.
    Verify(failwell::webhook::VerifyArgs),
}

/// The allocator of the whole process: mimalloc, whose thread-local free
/// lists cost the relay's many small, short-lived allocations (rows, request
/// and response bodies, futures) less than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own progress and report; the servers log their work.
    let default_filter = match cli.command {
        Command::Demo { .. }
        | Command::Webhook { .. }
        | Command::Check { .. }
        | Command::Status { .. }
        | Command::Dlq { .. }
        | Command::Reconcile { .. }
        | Command::Ops { .. }
        | Command::Ledger { .. }
        | Command::Openapi => "warn",
        Command::Serve { .. } | Command::Sim { .. } => "failwell=info,warn",
    };
    // The demo's report stays clean: what failwell logs while it runs goes
    // to a file, whose path the demo prints at its end.
    let demo_log = matches!(cli.command, Command::Demo { .. })
        .then(|| std::env::temp_dir().join(format!("failwell-demo-{}.log", std::process::id())));
    let filter =
        || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let logs = tracing_subscriber::fmt().with_env_filter(filter());
    let installed = match (&demo_log, cli.log_format) {
        (Some(path), format) => match std::fs::File::create(path) {
            Ok(file) => {
                let logs = logs.with_ansi(false).with_writer(std::sync::Mutex::new(file));
                match format {
                    LogFormat::Text => logs.try_init(),
                    LogFormat::Json => logs.json().try_init(),
                }
            }
            Err(e) => {
                eprintln!("error: cannot write the demo's log {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        (None, LogFormat::Text) => {
            logs.with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr).try_init()
        }
        (None, LogFormat::Json) => logs.json().with_writer(std::io::stderr).try_init(),
    };
    if let Err(e) = installed {
        eprintln!("error: cannot set up logging: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli, demo_log)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli, demo_log: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    // Before any configuration is loaded: see `failwell::prometheus`.
    failwell::prometheus();
    match cli.command {
        Command::Openapi => {
            println!("{}", serde_json::to_string_pretty(&failwell::http::openapi::document())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { common } => Ok(failwell::cli::status(common).await?),
        Command::Dlq { common, command } => Ok(failwell::cli::dlq(common, command).await?),
        Command::Reconcile { common, command: ReconcileCommand::Run(args) } => {
            Ok(failwell::cli::reconcile(common, args).await?)
        }
        Command::Ops { common, command: OpsCommand::Show { key } } => {
            Ok(failwell::cli::show(common, key).await?)
        }
        Command::Ops { common, command: OpsCommand::Resolve(args) } => {
            Ok(failwell::cli::resolve(common, args).await?)
        }
        Command::Ledger { common, command } => Ok(failwell::cli::ledger::ledger(common, command).await?),
        Command::Check { config } => {
            let config = failwell::config::load(config.as_deref())?;
            let store = failwell::store::StoreReport::inspect(&config.database_url).await?;
            print!("{}", failwell::check::report(&config, &store));
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { config } => {
            let config = failwell::config::load(config.as_deref())?;
            if config.providers.is_empty() {
                tracing::warn!(
                    "no providers are configured: every operation will be refused (see failwell.toml)"
                );
            }
            let listener = TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("cannot listen on {} (key `listen`)", config.listen))?;
            let url = config.database_url.clone();
            let server = failwell::Server::start(config, listener)
                .await
                .with_context(|| format!("cannot start failwell with database_url = {url:?}"))?;
            shutdown_signal().await?;
            tracing::info!("shutting down: finishing attempts in flight");
            server.shutdown().await;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sim {
            listen,
            profile,
            seed,
            key_ttl_ms,
            webhook_url,
            webhook_secret,
            rate_limit,
            rate_limit_by,
        } => {
            let listener =
                TcpListener::bind(&listen).await.with_context(|| format!("cannot listen on {listen}"))?;
            let mut config = SimConfig::new(profile, seed);
            config.key_ttl = std::time::Duration::from_millis(key_ttl_ms);
            config.webhooks =
                webhook_url.zip(webhook_secret).map(|(url, secret)| WebhookTarget { url, secret });
            config.rate_limit = rate_limit.map(|per_second| RateLimit {
                per_second,
                scope: rate_limit_by.map_or(RateScope::Global, RateScope::Header),
            });
            eprintln!("provider simulator ({profile}, seed {seed}) on http://{}", listener.local_addr()?);
            failwell_sim::serve(config, listener).await.context("simulator failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Webhook { command: WebhookCommand::Verify(args) } => {
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut body)
                .context("cannot read the body from stdin")?;
            match failwell::webhook::verify(&args, &body, failwell_engine::clock::wall())? {
                Ok(verified) => {
                    match verified.event_id {
                        Some(id) => println!("valid (event {id})"),
                        None => println!("valid"),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(reason) => {
                    println!("invalid: {reason}");
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Demo { orders, seed, profile, json, arrival_rate, concurrency, rate_limit, wallet } => {
            anyhow::ensure!(orders > 0, "--orders must be at least 1");
            anyhow::ensure!((1..=10_000).contains(&concurrency), "--concurrency must be between 1 and 10000");
            // Fail now, not after the run, when the report cannot be written.
            let json_file = json
                .as_ref()
                .map(|path| {
                    std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))
                })
                .transpose()?;
            // Ctrl-C drops the run, which removes its temporary database.
            let report = tokio::select! {
                report = demo::run(DemoArgs { orders, seed, profile, arrival_rate, concurrency, rate_limit, wallet }) => report?,
                _ = shutdown_signal() => anyhow::bail!("interrupted"),
            };
            println!("{}", report.table());
            if let Some(path) = &demo_log {
                let lines = std::fs::read_to_string(path).map_or(0, |log| log.lines().count());
                eprintln!("failwell's log of this run ({lines} lines): {}", path.display());
            }
            if let (Some(mut file), Some(path)) = (json_file, json) {
                let text = serde_json::to_string_pretty(&report)? + "\n";
                std::io::Write::write_all(&mut file, text.as_bytes())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            Ok(if report.failwell_held() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

/// A request header's name, lowercase (for `sim --rate-limit-by`).
fn header_name(name: &str) -> Result<String, String> {
    axum::http::HeaderName::from_bytes(name.as_bytes())
        .map(|h| h.as_str().to_owned())
        .map_err(|_| format!("{name:?} is not a header name"))
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM.
async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot wait for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
