//! The demo's report: the same ten figures for failwell and for the naive
//! client, as a table and as JSON.

use std::fmt::Write;

use serde::Serialize;

use super::WalletFigures;

/// One client's figures. Definitions (per intent = per order):
/// - `provider_effects`: charges the provider made;
/// - `double_effects`: intents the provider charged more than once;
/// - `lost`: intents whose final record disagrees with the provider about
///   whether they took effect: silently dropped (never charged, yet neither
///   reported failed nor held as a dead letter), believed charged with no
///   charge at the provider, or reported failed although charged;
/// - `unknown_remaining`: intents whose outcome the client does not know at
///   the end (failwell: still `unknown` or `pending`; naive: gave up after an
///   attempt that may have charged);
/// - `declined`: intents refused for good (402 `card_declined`);
/// - `dead_letters`: intents parked for a human after retries ran out;
/// - `attempts`: HTTP calls that may have an effect (lookups excluded);
/// - `rate_limited`: requests the provider answered 429 (calls and lookups);
/// - `paused_s`: how long the client stopped every call to the provider,
///   in s (the naive client never does);
/// - `p95_ms`: 95th percentile of the time from placing an order to its
///   final outcome, in ms (HDR histogram); for failwell, to the moment its
///   history shows the operation taking its final status (events that
///   later confirm it do not count);
/// - `elapsed_s`: wall time until every order had its final outcome, in s.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Orders placed.
    pub intents: u64,
    /// Charges made by the provider.
    pub provider_effects: u64,
    /// Orders charged more than once.
    pub double_effects: u64,
    /// Orders whose record disagrees with the provider.
    pub lost: u64,
    /// Orders whose outcome is unknown at the end.
    pub unknown_remaining: u64,
    /// Orders declined for good.
    pub declined: u64,
    /// Orders parked as dead letters.
    pub dead_letters: u64,
    /// Provider calls made.
    pub attempts: u64,
    /// Requests answered 429.
    pub rate_limited: u64,
    /// Time every call to the provider was stopped, s.
    pub paused_s: f64,
    /// p95 time to final outcome, ms.
    pub p95_ms: u64,
    /// Wall time, s.
    pub elapsed_s: f64,
}

/// What the provider's webhooks did during failwell's run (the naive client
/// receives none). Definitions:
/// - `sent`: distinct events the provider emitted;
/// - `deliveries`: deliveries failwell accepted (answered 2xx);
/// - `received`: events failwell stored, each once;
/// - `duplicates_absorbed`: accepted deliveries of an event already stored
///   (`deliveries - received`), which took no further effect;
/// - `resolved_by_webhook`: operations an event settled while their outcome
///   was still open (pending or unknown) at failwell.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WebhookFigures {
    /// Distinct events the provider emitted.
    pub sent: u64,
    /// Deliveries failwell accepted.
    pub deliveries: u64,
    /// Events stored.
    pub received: u64,
    /// Deliveries of an event already stored.
    pub duplicates_absorbed: u64,
    /// Operations settled by an event while open.
    pub resolved_by_webhook: u64,
}

/// The demo's result: failwell and the naive client on the same faults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// failwell's figures.
    pub failwell: Figures,
    /// The naive client's figures.
    pub naive: Figures,
    /// The provider's webhooks to failwell.
    pub webhooks: WebhookFigures,
    /// The wallets, when orders paid partly from them (`--wallet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wallet: Option<WalletFigures>,
}

impl Report {
    /// Whether failwell kept its promises: no double effect, nothing lost,
    /// no unknown outcome left, and every wallet followed its card charge
    /// ([`WalletFigures::held`]).
    pub fn failwell_held(&self) -> bool {
        self.failwell.double_effects == 0
            && self.failwell.lost == 0
            && self.failwell.unknown_remaining == 0
            && self.wallet.as_ref().is_none_or(WalletFigures::held)
    }

    /// The side-by-side table printed at the end of the demo.
    pub fn table(&self) -> String {
        let (f, n) = (&self.failwell, &self.naive);
        let rows: [(&str, String, String); 12] = [
            ("intents", f.intents.to_string(), n.intents.to_string()),
            ("provider effects", f.provider_effects.to_string(), n.provider_effects.to_string()),
            ("double effects", f.double_effects.to_string(), n.double_effects.to_string()),
            ("lost", f.lost.to_string(), n.lost.to_string()),
            ("unknown remaining", f.unknown_remaining.to_string(), n.unknown_remaining.to_string()),
            ("declined", f.declined.to_string(), n.declined.to_string()),
            ("dead letters", f.dead_letters.to_string(), n.dead_letters.to_string()),
            ("attempts", f.attempts.to_string(), n.attempts.to_string()),
            ("answered 429", f.rate_limited.to_string(), n.rate_limited.to_string()),
            ("provider paused (s)", format!("{:.1}", f.paused_s), format!("{:.1}", n.paused_s)),
            ("p95 to outcome (ms)", f.p95_ms.to_string(), n.p95_ms.to_string()),
            ("elapsed (s)", format!("{:.2}", f.elapsed_s), format!("{:.2}", n.elapsed_s)),
        ];
        let mut out = String::new();
        let _ = writeln!(out, "{:<22}{:>12}{:>12}", "", "failwell", "naive");
        for (label, a, b) in rows {
            let _ = writeln!(out, "{label:<22}{a:>12}{b:>12}");
        }
        let w = &self.webhooks;
        let _ = writeln!(
            out,
            "webhooks to failwell: {} sent, {} received once each, {} duplicate deliveries absorbed, \
             {} operations resolved by webhook",
            w.sent, w.received, w.duplicates_absorbed, w.resolved_by_webhook
        );
        if let Some(w) = &self.wallet {
            let _ = writeln!(
                out,
                "wallets: {} holds, {} posted with their charge, {} voided with their failed charge, {} pending; \
                 {} debited for a failed charge, {} released for a paid charge, {} refunded twice, \
                 {} balances off",
                w.holds,
                w.posted,
                w.voided,
                w.pending_remaining,
                w.debited_for_failed_charge,
                w.released_for_paid_charge,
                w.refunded_twice,
                w.balance_mismatches
            );
        }
        let verdict = match (self.failwell_held(), &self.wallet) {
            (true, None) => "failwell: 0 double effects, 0 lost, 0 unknown remaining",
            (true, Some(_)) => {
                "failwell: 0 double effects, 0 lost, 0 unknown remaining, every wallet followed its charge"
            }
            (false, _) => "failwell BROKE A PROMISE: see double effects / lost / unknown remaining / wallets",
        };
        let _ = write!(out, "{verdict}");
        out
    }
}
