//! The demo's wallets (`failwell demo --wallet`): each order pays
//! [`WALLET_SHARE_PERCENT`] % from its customer's wallet and the rest by
//! card. The wallet part is a ledger hold made in the order's own
//! transaction and tied to the card charge (`docs/LEDGER.md`): the charge's
//! success posts it, its failure voids it, and while the charge is unknown
//! it stays pending. Once every operation is settled, the demo checks
//! the wallets against the provider's own record of charges.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use failwell_policy::HoldState;
use failwell_sim::Effects;
use failwell_store::prelude::*;
use failwell_store::{NewAccount, NewHold, NewTransfer, SqliteStore, StoreError, TransferResult};
use serde::Serialize;

use super::{DemoError, Order, effects_of};

/// The share of each order paid from the wallet, in percent.
pub const WALLET_SHARE_PERCENT: u64 = 30;
/// Customers, each with one wallet; order `n` is customer `n % CUSTOMERS`'s.
const CUSTOMERS: usize = 50;
/// The system account wallets are topped up from (no floor: its balance
/// is what the customers paid in, negated).
const WORLD: &str = "world:eur";
/// The shop's account: the wallet parts of paid orders end up here.
const SHOP: &str = "shop:eur";
/// How long the demo waits, once every operation is settled, for the
/// holds to follow (the hold sweep runs every 500 ms).
const FOLLOW_LIMIT: Duration = Duration::from_secs(10);

/// The wallet part of an order: `amount` (minor units) from `account`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletPart {
    /// The customer's wallet account, e.g. `wallet:customer-007`.
    pub account: String,
    /// Minor units held from it.
    pub amount: u64,
}

/// Splits order `n`'s `total` into its wallet part and its card amount.
pub(super) fn split(n: usize, total: u64) -> (WalletPart, u64) {
    let held = total * WALLET_SHARE_PERCENT / 100;
    let account = format!("wallet:customer-{:03}", n % CUSTOMERS);
    (WalletPart { account, amount: held }, total - held)
}

/// The hold an order's message carries: its wallet part, for the shop.
pub(super) fn hold(order: &Order) -> Option<NewHold> {
    order.wallet.as_ref().map(|part| NewHold {
        id: hold_id(order),
        debit_account: part.account.clone(),
        credit_account: SHOP.into(),
        amount: part.amount as i64,
    })
}

fn hold_id(order: &Order) -> String {
    format!("{}-wallet", order.reference)
}

/// Each wallet's top-up: exactly the wallet parts of its orders.
fn top_ups(orders: &[Order]) -> BTreeMap<&str, u64> {
    let mut top_ups: BTreeMap<&str, u64> = BTreeMap::new();
    for part in orders.iter().filter_map(|o| o.wallet.as_ref()) {
        *top_ups.entry(&part.account).or_default() += part.amount;
    }
    top_ups
}

/// Opens the shop's, the world's and every customer's account, and tops
/// each wallet up ([`top_ups`], one batch).
pub(super) async fn open(store: &SqliteStore, orders: &[Order], now_ms: i64) -> Result<(), DemoError> {
    let top_ups = top_ups(orders);
    let accounts =
        [(WORLD, None), (SHOP, Some(0))].into_iter().chain(top_ups.keys().map(|id| (*id, Some(0))));
    for (id, floor) in accounts {
        let account = NewAccount { id: id.into(), unit: "EUR".into(), floor };
        store.open_account(account, now_ms).await?;
    }
    let batch = top_ups
        .iter()
        .map(|(wallet, amount)| NewTransfer {
            id: format!("top-up:{wallet}"),
            debit_account: WORLD.into(),
            credit_account: (*wallet).into(),
            amount: *amount as i64,
            pending: false,
            timeout_ms: None,
        })
        .collect();
    for result in store.transfer(batch, now_ms).await? {
        if let TransferResult::Refused { id, reason } = result {
            return Err(DemoError::TopUp { id, reason });
        }
    }
    Ok(())
}

/// Waits (at most [`FOLLOW_LIMIT`]) until no hold is pending: the sweep
/// ends a hold shortly after its operation settles.
pub(super) async fn follow(store: &SqliteStore) -> Result<(), StoreError> {
    let deadline = tokio::time::Instant::now() + FOLLOW_LIMIT;
    while store.ledger_stats().await?.holds_pending > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// What the wallets show once every operation is settled. Definitions:
/// - `holds`: orders whose wallet part was held with the card charge;
/// - `posted`: holds posted (the card charge succeeded);
/// - `voided`: holds voided (the card charge failed for good);
/// - `pending_remaining`: holds still pending;
/// - `debited_for_failed_charge`: holds posted although the provider has
///   no charge for the order;
/// - `released_for_paid_charge`: holds voided or expired although the
///   provider charged the card (the shop would lose the wallet part);
/// - `refunded_twice`: holds with more than one ending in the journal;
/// - `balance_mismatches`: wallets whose balance is not their top-up less
///   their posted holds, or not the sum of their journal, plus one if the
///   balances of all accounts do not sum to zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WalletFigures {
    /// Orders whose wallet part was held.
    pub holds: u64,
    /// Holds posted with their charge.
    pub posted: u64,
    /// Holds voided with their failed charge.
    pub voided: u64,
    /// Holds still pending.
    pub pending_remaining: u64,
    /// Holds posted without a charge at the provider.
    pub debited_for_failed_charge: u64,
    /// Holds released although the provider charged.
    pub released_for_paid_charge: u64,
    /// Holds ended more than once.
    pub refunded_twice: u64,
    /// Balances that disagree with the top-ups, the holds or the journal.
    pub balance_mismatches: u64,
}

impl WalletFigures {
    /// Whether every wallet followed its card charge: nothing debited for a
    /// failed charge, released for a paid one, refunded twice, left
    /// pending, or out of balance.
    pub fn held(&self) -> bool {
        self.pending_remaining == 0
            && self.debited_for_failed_charge == 0
            && self.released_for_paid_charge == 0
            && self.refunded_twice == 0
            && self.balance_mismatches == 0
    }
}

/// Checks every order's hold against the provider's `effects`, and every
/// wallet's balance against its top-up, its posted holds and its journal.
pub(super) async fn figures(
    store: &SqliteStore,
    orders: &[Order],
    effects: &Effects,
) -> Result<WalletFigures, StoreError> {
    let mut f = WalletFigures::default();
    let mut posted_from: HashMap<String, i64> = HashMap::new();
    for order in orders {
        let Some(part) = &order.wallet else { continue };
        let Some(hold) = store.transfer_by_id(&hold_id(order)).await? else { continue };
        f.holds += 1;
        let charged = effects_of(effects, &order.reference) > 0;
        match hold.state {
            HoldState::Posted => {
                f.posted += 1;
                f.debited_for_failed_charge += u64::from(!charged);
                *posted_from.entry(part.account.clone()).or_default() += hold.posted_amount.unwrap_or(0);
            }
            HoldState::Voided | HoldState::Expired => {
                f.voided += 1;
                f.released_for_paid_charge += u64::from(charged);
            }
            HoldState::Pending => f.pending_remaining += 1,
        }
    }
    let top_ups = top_ups(orders);
    let mut total = 0;
    let mut after = String::new();
    loop {
        let page = store.accounts(&after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.id.clone();
        for account in &page {
            total += account.posted;
            if !account.id.starts_with("wallet:") {
                continue;
            }
            let (sum, twice) = journal(store, &account.id).await?;
            f.refunded_twice += twice;
            let top_up = top_ups.get(account.id.as_str()).copied().unwrap_or(0) as i64;
            let expected = top_up - posted_from.get(&account.id).copied().unwrap_or(0);
            f.balance_mismatches += u64::from(account.posted != expected || account.posted != sum);
        }
    }
    f.balance_mismatches += u64::from(total != 0);
    Ok(f)
}

/// The sum of account `id`'s journal (posted amounts) and how many of its
/// holds ended more than once.
async fn journal(store: &SqliteStore, id: &str) -> Result<(i64, u64), StoreError> {
    let (mut sum, mut endings, mut after) = (0, HashMap::<String, u64>::new(), 0);
    loop {
        let page = store.entries(id, after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for entry in page {
            sum += entry.posted;
            if matches!(entry.event.as_str(), "post" | "void" | "expire") {
                *endings.entry(entry.transfer_id).or_default() += 1;
            }
        }
    }
    Ok((sum, endings.values().filter(|n| **n > 1).count() as u64))
}
