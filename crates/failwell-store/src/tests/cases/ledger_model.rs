//! Random histories of transfers, holds, posts, voids and expiries,
//! applied to the store and to a model built on the policy's rules.

/// The ledger's property test. For the `S` and `store()` in scope, inside
/// [`super::store_tests!`].
macro_rules! ledger_model_cases {
    () => {
        /// Whatever is applied or refused, in batches or alone: the store
        /// agrees with the policy's rules applied one request at a time;
        /// every account's figures are the sums of its journal; each unit's
        /// posted balances sum to zero and its pending debits equal its
        /// pending credits; no account with a floor is below it.
        #[tokio::test]
        async fn random_histories_keep_the_ledger_balanced() {
            use proptest::strategy::{Strategy, ValueTree};
            use proptest::test_runner::TestRunner;

            let (_d, s) = store().await;
            let mut runner = TestRunner::deterministic();
            let histories = proptest::collection::vec(crate::tests::cases::ledger_model::step(), 1..40);
            for case in 0..24 {
                let steps = histories.new_tree(&mut runner).unwrap().current();
                crate::tests::cases::ledger_model::check(&s, &format!("c{case}"), steps).await;
            }
        }
    };
}

pub(crate) use ledger_model_cases;

use std::collections::HashMap;

use failwell_policy::{Balance, HoldAction, HoldState, Sides};
use proptest::prelude::*;

use crate::{HoldEnd, NewAccount, NewTransfer, Transfer, TransferResult};

/// The accounts of a history: (name, unit, floor).
const ACCOUNTS: [(&str, &str, Option<i64>); 6] = [
    ("w1", "EUR", Some(0)),
    ("w2", "EUR", Some(0)),
    ("od", "EUR", Some(-50)),
    ("sys", "EUR", None),
    ("p1", "pts", Some(0)),
    ("psys", "pts", None),
];

/// One step of a history.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Transfers (from, to, amount, pending, timeout) in one batch.
    Batch(Vec<(usize, usize, i64, bool, Option<i64>)>),
    /// Posts the n-th transfer made so far (for the amount, or in full).
    Post(usize, Option<i64>),
    /// Voids the n-th transfer made so far.
    Void(usize),
    /// Sends the n-th transfer made so far again.
    Again(usize),
    /// Lets this much time pass, then sweeps the holds.
    Sweep(i64),
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    let transfer = (0..6usize, 0..6usize, -2..120i64, any::<bool>(), prop::option::weighted(0.3, 1..60i64));
    prop_oneof![
        4 => prop::collection::vec(transfer, 1..5).prop_map(Step::Batch),
        2 => (0..30usize, prop::option::of(-2..130i64)).prop_map(|(n, a)| Step::Post(n, a)),
        1 => (0..30usize).prop_map(Step::Void),
        1 => (0..30usize).prop_map(Step::Again),
        1 => (0..80i64).prop_map(Step::Sweep),
    ]
}

/// The model: every account and every hold, by the policy's rules.
#[derive(Default)]
struct Model {
    accounts: HashMap<String, Balance>,
    applied: std::collections::HashSet<String>,
    holds: HashMap<String, (String, String, i64, HoldState, Option<i64>)>,
}

impl Model {
    fn transfer(&mut self, t: &NewTransfer, units: &HashMap<String, &str>, now: i64) -> bool {
        if t.timeout_ms.is_some_and(|ms| !t.pending || ms <= 0)
            || units[&t.debit_account] != units[&t.credit_account]
        {
            return false;
        }
        let sides =
            Sides { debit: self.accounts[&t.debit_account], credit: self.accounts[&t.credit_account] };
        let Ok(applied) =
            failwell_policy::transfer(sides, t.amount, t.pending, t.debit_account == t.credit_account)
        else {
            return false;
        };
        self.accounts.insert(t.debit_account.clone(), applied.debit_after);
        self.accounts.insert(t.credit_account.clone(), applied.credit_after);
        if t.pending {
            let expires = t.timeout_ms.map(|ms| now + ms);
            self.holds.insert(
                t.id.clone(),
                (t.debit_account.clone(), t.credit_account.clone(), t.amount, HoldState::Pending, expires),
            );
        }
        true
    }

    fn end(&mut self, id: &str, action: HoldAction) {
        let Some((debit, credit, held, state, _)) = self.holds.get(id).cloned() else { return };
        let sides = Sides { debit: self.accounts[&debit], credit: self.accounts[&credit] };
        if let Ok((next, applied)) = failwell_policy::end_hold(sides, held, state, action) {
            self.accounts.insert(debit, applied.debit_after);
            self.accounts.insert(credit, applied.credit_after);
            self.holds.get_mut(id).unwrap().3 = next;
        }
    }
}

/// Runs `steps` on `s` with accounts and transfers named `prefix:…`, and
/// checks the store against the model and the ledger's invariants.
pub(crate) async fn check<S: crate::Backend>(s: &S, prefix: &str, steps: Vec<Step>) {
    let name = |i: usize| format!("{prefix}:{}", ACCOUNTS[i].0);
    let units: HashMap<String, &str> = (0..ACCOUNTS.len()).map(|i| (name(i), ACCOUNTS[i].1)).collect();
    let mut model = Model::default();
    for (i, (_, unit, floor)) in ACCOUNTS.iter().enumerate() {
        let account = NewAccount { id: name(i), unit: (*unit).into(), floor: *floor };
        s.open_account(account, 0).await.unwrap();
        model.accounts.insert(name(i), Balance::new(*floor));
    }
    let mut made: Vec<NewTransfer> = Vec::new();
    let mut now = 1;
    for step in steps {
        now += 10;
        match step {
            Step::Batch(batch) => {
                let batch: Vec<NewTransfer> = batch
                    .into_iter()
                    .enumerate()
                    .map(|(k, (from, to, amount, pending, timeout_ms))| NewTransfer {
                        id: format!("{prefix}:t{}", made.len() + k),
                        debit_account: name(from),
                        credit_account: name(to),
                        amount,
                        pending,
                        timeout_ms,
                    })
                    .collect();
                let results = s.transfer(batch.clone(), now).await.unwrap();
                for (t, result) in batch.into_iter().zip(results) {
                    let applied = model.transfer(&t, &units, now);
                    assert_eq!(matches!(result, TransferResult::Created(_)), applied, "{t:?}: {result:?}");
                    if applied {
                        model.applied.insert(t.id.clone());
                    }
                    made.push(t);
                }
            }
            Step::Again(n) => {
                let Some(t) = made.get(n) else { continue };
                let result = s.transfer(vec![t.clone()], now).await.unwrap().remove(0);
                if model.applied.contains(&t.id) {
                    assert!(matches!(result, TransferResult::Replayed(_)), "{t:?}: {result:?}");
                } else {
                    // A refusal is not recorded: sent again, it is decided again.
                    let applied = model.transfer(t, &units, now);
                    assert_eq!(matches!(result, TransferResult::Created(_)), applied, "{t:?}: {result:?}");
                    if applied {
                        model.applied.insert(t.id.clone());
                    }
                }
            }
            Step::Post(n, amount) => {
                let Some(t) = made.get(n) else { continue };
                s.end_hold(&t.id, HoldEnd::Post(amount), now).await.unwrap();
                model.end(&t.id, HoldAction::Post(amount.unwrap_or(t.amount)));
            }
            Step::Void(n) => {
                let Some(t) = made.get(n) else { continue };
                s.end_hold(&t.id, HoldEnd::Void, now).await.unwrap();
                model.end(&t.id, HoldAction::Void);
            }
            Step::Sweep(ms) => {
                now += ms;
                s.settle_holds(now, 10_000).await.unwrap();
                let due: Vec<String> = model
                    .holds
                    .iter()
                    .filter(|(_, h)| h.3 == HoldState::Pending && h.4.is_some_and(|at| at <= now))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in due {
                    model.end(&id, HoldAction::Expire);
                }
            }
        }
    }
    let mut sums: HashMap<&str, (i64, i64, i64)> = HashMap::new();
    for (i, (_, unit, floor)) in ACCOUNTS.iter().enumerate() {
        let a = s.account(&name(i)).await.unwrap().unwrap();
        let expected = model.accounts[&name(i)];
        assert_eq!(
            (a.posted, a.debits_pending, a.credits_pending),
            (expected.posted, expected.debits_pending, expected.credits_pending),
            "{}",
            name(i)
        );
        let entries = s.entries(&name(i), 0, 100_000).await.unwrap();
        let journal = entries
            .iter()
            .fold((0, 0, 0), |(p, d, c), e| (p + e.posted, d + e.debits_pending, c + e.credits_pending));
        assert_eq!(journal, (a.posted, a.debits_pending, a.credits_pending), "{}: the journal", name(i));
        if let Some(floor) = floor {
            assert!(a.available >= *floor, "{}: below its floor", name(i));
        }
        let sum = sums.entry(unit).or_default();
        *sum = (sum.0 + a.posted, sum.1 + a.debits_pending, sum.2 + a.credits_pending);
    }
    for (unit, (posted, debits, credits)) in sums {
        assert_eq!(posted, 0, "{unit}: posted balances sum to zero");
        assert_eq!(debits, credits, "{unit}: pending debits equal pending credits");
    }
    for t in &made {
        let stored: Option<Transfer> = s.transfer_by_id(&t.id).await.unwrap();
        let Some(stored) = stored else { continue };
        if let Some(hold) = model.holds.get(&t.id) {
            assert_eq!(stored.state, hold.3, "{}", t.id);
        }
    }
}
