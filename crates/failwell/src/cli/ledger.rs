//! `failwell ledger …`: the balance ledger from the command line
//! (`docs/LEDGER.md`). Opens accounts, makes transfers and holds, posts and
//! voids holds, and reads accounts, journals, holds and transfers, on the
//! store of the given configuration, like `failwell dlq`.
//!
//! Exit status: 0 done (a transfer or account replayed included), 1 what
//! was named does not exist, 2 refused (nothing was written) or failed.

use std::process::ExitCode;

use clap::Subcommand;
use failwell_store::{
    Ended, HoldEnd, NewAccount, NewTransfer, Opened, Store, Transfer, TransferRefusal, TransferResult,
};
use serde_json::json;

use super::{CliError, Common, open, print};
use crate::ops::ledger::{self as view, floor};
use crate::ops::printable;

/// Why the ledger refused a command: nothing was written (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum LedgerRefused {
    /// The account exists with another unit or floor.
    #[error("account {id:?} exists with unit {unit} and floor {floor}: nothing changed")]
    AccountDiffers {
        /// The account's id.
        id: String,
        /// Its unit.
        unit: String,
        /// Its floor, as shown (`none`: no limit).
        floor: String,
    },
    /// The transfer was refused (insufficient funds, its id used with other
    /// content, an unknown account, …).
    #[error("transfer {id:?} refused")]
    Transfer {
        /// The transfer's id.
        id: String,
        /// Why.
        #[source]
        reason: TransferRefusal,
    },
    /// The hold could not be posted or voided (it ended otherwise, is tied
    /// to an operation, is not a hold, the amount is over it).
    #[error("hold {id:?} not {action}")]
    Hold {
        /// The transfer's id.
        id: String,
        /// `posted` or `voided`.
        action: &'static str,
        /// Why.
        #[source]
        reason: TransferRefusal,
    },
}

/// At most this many rows per page unless `--limit` says otherwise.
const PAGE: u32 = 100;

/// `failwell ledger …`.
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Open an account (again with the same unit and floor: nothing changes).
    Open {
        /// The account's id, e.g. wallet:alice (1–255 printable ASCII
        /// characters, no spaces).
        id: String,
        /// Its unit, e.g. EUR or points; transfers stay within one unit.
        #[arg(long)]
        unit: String,
        /// The lowest available balance a debit may leave, in minor units
        /// (negative: an overdraft limit).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true, conflicts_with = "no_floor")]
        floor: i64,
        /// No floor: a system account (e.g. world:EUR, where money comes from).
        #[arg(long)]
        no_floor: bool,
    },
    /// Move AMOUNT minor units from FROM to TO at once, or hold them
    /// (--pending) until posted, voided or expired. ID is the transfer's
    /// idempotency key: the same ID with the same content is applied once.
    Transfer {
        /// The transfer's id.
        id: String,
        /// The account debited.
        from: String,
        /// The account credited.
        to: String,
        /// Minor units (cents), more than zero.
        #[arg(value_parser = clap::value_parser!(i64).range(1..))]
        amount: i64,
        /// A hold: reserve the amount now, post or void it later.
        #[arg(long)]
        pending: bool,
        /// The hold expires (releasing its amount) unless posted or voided
        /// within this many ms.
        #[arg(long, requires = "pending", value_parser = clap::value_parser!(i64).range(1..))]
        timeout_ms: Option<i64>,
    },
    /// Post a hold: its amount (or less, --amount) moves; the rest is released.
    Post {
        /// The hold's transfer id.
        id: String,
        /// Post this much of it (default: all).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        amount: Option<i64>,
    },
    /// Void a hold: its amount is released.
    Void {
        /// The hold's transfer id.
        id: String,
    },
    /// An account's figures and a page of its journal, oldest first.
    Account {
        /// The account's id.
        id: String,
        /// Only entries after this entry (from the previous page's end).
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// At most this many entries.
        #[arg(long, default_value_t = PAGE, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// The accounts with their figures, by id.
    Accounts {
        /// Only accounts with ids after this one (the previous page's end).
        #[arg(long, default_value = "")]
        after: String,
        /// At most this many accounts.
        #[arg(long, default_value_t = PAGE, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// The pending holds, oldest first, with their age and the operation
    /// whose outcome ends each.
    Holds {
        /// At most this many holds.
        #[arg(long, default_value_t = PAGE, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// One transfer or hold, with its state.
    Show {
        /// The transfer's id.
        id: String,
    },
}

/// `failwell ledger …`: exit 1 when the account or transfer named does not
/// exist, an error ([`LedgerRefused`] among them) when refused.
pub async fn ledger(common: Common, command: LedgerCommand) -> Result<ExitCode, CliError> {
    let (_, store) = open(&common).await?;
    let done = run(&store, common.json, command).await;
    store.close().await;
    done
}

fn missing(what: &str, id: &str) -> ExitCode {
    eprintln!("no {what} has the id {:?}", printable(id));
    ExitCode::from(1)
}

async fn run(store: &Store, json: bool, command: LedgerCommand) -> Result<ExitCode, CliError> {
    let now = failwell_engine::now_ms();
    match command {
        LedgerCommand::Open { id, unit, floor: at, no_floor } => {
            let floor_asked = (!no_floor).then_some(at);
            let (result, account) =
                match store.open_account(NewAccount { id, unit, floor: floor_asked }, now).await? {
                    Opened::Created(a) => ("created", a),
                    Opened::Existing(a) => ("existing", a),
                    Opened::Differs(a) => {
                        return Err(LedgerRefused::AccountDiffers {
                            id: a.id,
                            unit: a.unit,
                            floor: floor(a.floor),
                        }
                        .into());
                    }
                };
            print(json, &json!({ "result": result, "account": account }), || {
                let (id, unit) = (printable(&account.id), printable(&account.unit));
                let floor = floor(account.floor);
                match result {
                    "created" => format!("account {id} opened: unit {unit}, floor {floor}\n"),
                    _ => format!(
                        "account {id} exists already with unit {unit} and floor {floor}: nothing changed\n"
                    ),
                }
            })?;
        }
        LedgerCommand::Transfer { id, from, to, amount, pending, timeout_ms } => {
            let new =
                NewTransfer { id, debit_account: from, credit_account: to, amount, pending, timeout_ms };
            let (result, t) = match store.transfer(vec![new], now).await?.pop() {
                Some(TransferResult::Created(t)) => ("created", t),
                Some(TransferResult::Replayed(t)) => ("replayed", t),
                Some(TransferResult::Refused { id, reason }) => {
                    return Err(LedgerRefused::Transfer { id, reason }.into());
                }
                None => unreachable!("the store answers each transfer of a batch"),
            };
            print(json, &json!({ "result": result, "transfer": t }), || match result {
                "created" => format!("{} {} made\n{}", kind(&t), printable(&t.id), view::transfer_text(&t)),
                _ => format!(
                    "{} {} was made before with this content: nothing changed (replayed)\n{}",
                    kind(&t),
                    printable(&t.id),
                    view::transfer_text(&t)
                ),
            })?;
        }
        LedgerCommand::Post { id, amount } => return end(store, json, &id, HoldEnd::Post(amount), now).await,
        LedgerCommand::Void { id } => return end(store, json, &id, HoldEnd::Void, now).await,
        LedgerCommand::Account { id, after, limit } => {
            let Some(page) = view::account_page(store, &id, after, limit).await? else {
                return Ok(missing("account", &id));
            };
            print(json, &page, || view::account_text(&page))?;
        }
        LedgerCommand::Accounts { after, limit } => {
            let page = view::accounts_page(store, &after, limit).await?;
            print(json, &page, || {
                let mut text = view::accounts_table(&page.accounts);
                if let Some(after) = &page.next_after {
                    text.push_str(&format!("more accounts: --after {}\n", printable(after)));
                }
                text
            })?;
        }
        LedgerCommand::Holds { limit } => {
            let (holds, more) = view::pending_holds(store, limit, now).await?;
            print(json, &json!({ "holds": holds, "more": more }), || view::holds_table(&holds))?;
            if more {
                eprintln!("more pending holds than --limit {limit} are not shown");
            }
        }
        LedgerCommand::Show { id } => {
            let Some(t) = store.transfer_by_id(&id).await? else { return Ok(missing("transfer", &id)) };
            print(json, &t, || view::transfer_text(&t))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `transfer` or `hold`, as the first word of an answer.
fn kind(t: &Transfer) -> &'static str {
    if t.pending { "hold" } else { "transfer" }
}

/// `post` and `void`.
async fn end(store: &Store, json: bool, id: &str, how: HoldEnd, now: i64) -> Result<ExitCode, CliError> {
    let action = match how {
        HoldEnd::Post(_) => "posted",
        HoldEnd::Void => "voided",
    };
    let (result, t) = match store.end_hold(id, how, now).await? {
        Ended::Now(t) => ("ended", t),
        Ended::Already(t) => ("already", t),
        Ended::Refused(_, reason) => {
            return Err(LedgerRefused::Hold { id: id.to_owned(), action, reason }.into());
        }
        Ended::NotFound => return Ok(missing("transfer", id)),
    };
    print(json, &json!({ "result": result, "transfer": t }), || {
        let first = match result {
            "ended" => format!("hold {} {action}\n", printable(id)),
            _ => format!("hold {} was {action} already the same way: nothing changed\n", printable(id)),
        };
        first + &view::transfer_text(&t)
    })?;
    Ok(ExitCode::SUCCESS)
}
