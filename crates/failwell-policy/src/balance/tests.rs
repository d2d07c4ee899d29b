use proptest::prelude::*;

use super::*;

fn account(floor: Option<i64>, posted: i64, debits_pending: i64) -> Balance {
    Balance { floor, posted, debits_pending, credits_pending: 0 }
}

fn sides(debit: Balance) -> Sides {
    Sides { debit, credit: Balance::new(Some(0)) }
}

/// A transfer case: name, debit account, amount, pending, and the debit's
/// `(posted, debits_pending)` and the credit's posted after it (or the
/// refusal).
type TransferCase = (&'static str, Balance, i64, bool, Result<(i64, i64, i64), Refused>);

/// A hold's end: name, its state, the action, and its state with the
/// debit's `(posted, debits_pending)` and the credit's posted after it (or
/// the refusal).
type EndCase = (&'static str, HoldState, HoldAction, Result<(HoldState, i64, i64, i64), Refused>);

#[test]
fn transfers_move_money_or_are_refused_as_the_table_says() {
    let cases: &[TransferCase] = &[
        ("posted within the balance", account(Some(0), 100, 0), 60, false, Ok((40, 0, 60))),
        ("posted to exactly zero", account(Some(0), 100, 0), 100, false, Ok((0, 0, 100))),
        (
            "posted past zero",
            account(Some(0), 100, 0),
            101,
            false,
            Err(Refused::InsufficientFunds { available: 100, floor: 0, amount: 101 }),
        ),
        (
            "holds count against the balance",
            account(Some(0), 100, 70),
            31,
            false,
            Err(Refused::InsufficientFunds { available: 30, floor: 0, amount: 31 }),
        ),
        ("a hold reserves without moving", account(Some(0), 100, 0), 30, true, Ok((100, 30, 0))),
        (
            "a hold past the balance",
            account(Some(0), 10, 0),
            11,
            true,
            Err(Refused::InsufficientFunds { available: 10, floor: 0, amount: 11 }),
        ),
        ("a negative floor is an overdraft limit", account(Some(-50), 0, 0), 50, false, Ok((-50, 0, 50))),
        (
            "a positive floor keeps a minimum",
            account(Some(20), 100, 0),
            81,
            false,
            Err(Refused::InsufficientFunds { available: 100, floor: 20, amount: 81 }),
        ),
        (
            "no floor: a system account goes negative",
            account(None, 0, 0),
            1_000,
            false,
            Ok((-1_000, 0, 1_000)),
        ),
        ("zero", account(None, 0, 0), 0, false, Err(Refused::NotPositive(0))),
        ("negative", account(None, 0, 0), -5, false, Err(Refused::NotPositive(-5))),
        ("overflow below", account(None, i64::MIN + 1, 0), 2, false, Err(Refused::Overflow)),
    ];
    for (name, debit, amount, pending, expected) in cases {
        let got = transfer(sides(*debit), *amount, *pending, false)
            .map(|a| (a.debit_after.posted, a.debit_after.debits_pending, a.credit_after.posted));
        assert_eq!(&got, expected, "{name}");
    }
}

#[test]
fn a_transfer_to_the_same_account_is_refused() {
    assert_eq!(transfer(sides(account(None, 0, 0)), 1, false, true), Err(Refused::SameAccount));
}

#[test]
fn a_credit_that_overflows_is_refused() {
    let full =
        Sides { debit: Balance::new(None), credit: Balance { posted: i64::MAX, ..Balance::default() } };
    assert_eq!(transfer(full, 1, false, false), Err(Refused::Overflow));
}

#[test]
fn holds_end_once_as_the_table_says() {
    let held = Sides {
        debit: Balance { floor: Some(0), posted: 100, debits_pending: 30, credits_pending: 0 },
        credit: Balance { floor: Some(0), posted: 0, debits_pending: 0, credits_pending: 30 },
    };
    let cases: &[EndCase] = &[
        ("post in full", HoldState::Pending, HoldAction::Post(30), Ok((HoldState::Posted, 70, 0, 30))),
        (
            "post for less releases the rest",
            HoldState::Pending,
            HoldAction::Post(10),
            Ok((HoldState::Posted, 90, 0, 10)),
        ),
        (
            "post for more",
            HoldState::Pending,
            HoldAction::Post(31),
            Err(Refused::PostExceedsHold { held: 30, amount: 31 }),
        ),
        ("post for zero", HoldState::Pending, HoldAction::Post(0), Err(Refused::NotPositive(0))),
        ("void", HoldState::Pending, HoldAction::Void, Ok((HoldState::Voided, 100, 0, 0))),
        ("expire", HoldState::Pending, HoldAction::Expire, Ok((HoldState::Expired, 100, 0, 0))),
        (
            "post a posted hold",
            HoldState::Posted,
            HoldAction::Post(30),
            Err(Refused::NotPending(HoldState::Posted)),
        ),
        (
            "void a posted hold",
            HoldState::Posted,
            HoldAction::Void,
            Err(Refused::NotPending(HoldState::Posted)),
        ),
        (
            "post a voided hold",
            HoldState::Voided,
            HoldAction::Post(30),
            Err(Refused::NotPending(HoldState::Voided)),
        ),
        (
            "void an expired hold",
            HoldState::Expired,
            HoldAction::Void,
            Err(Refused::NotPending(HoldState::Expired)),
        ),
    ];
    for (name, state, action, expected) in cases {
        let got = end_hold(held, 30, *state, *action).map(|(next, a)| {
            assert_eq!(a.credit_after.credits_pending, 0, "{name}: the credit side's hold is released");
            (next, a.debit_after.posted, a.debit_after.debits_pending, a.credit_after.posted)
        });
        assert_eq!(&got, expected, "{name}");
    }
}

#[test]
fn an_operation_outcome_posts_voids_keeps_or_corrects_its_hold() {
    use HoldState::{Expired, Pending, Posted, Voided};
    use Outcome::{Failed, Succeeded, Unknown};
    let cases = [
        (Some(Succeeded), Pending, Some(HoldAction::Post(30))),
        (Some(Failed), Pending, Some(HoldAction::Void)),
        (Some(Unknown), Pending, None),
        (None, Pending, None),
        // Already agrees.
        (Some(Succeeded), Posted, None),
        (Some(Failed), Voided, None),
        (Some(Failed), Expired, None),
        // The outcome changed after the hold ended: it follows.
        (Some(Failed), Posted, Some(HoldAction::Reverse(25))),
        (Some(Succeeded), Voided, Some(HoldAction::Repost(30))),
        (Some(Succeeded), Expired, Some(HoldAction::Repost(30))),
        // Not known (again): an ended hold stays as it is.
        (Some(Unknown), Posted, None),
        (None, Voided, None),
    ];
    for (outcome, state, expected) in cases {
        assert_eq!(hold_after(outcome, state, 30, 25), expected, "{outcome:?} on a {state} hold");
    }
}

#[test]
fn a_correction_moves_the_amount_back_or_again_within_the_floors() {
    // A hold of 30 posted for 25: the wallet (debit) has 75, the shop 25.
    let posted = Sides {
        debit: Balance { floor: Some(0), posted: 75, debits_pending: 0, credits_pending: 0 },
        credit: Balance { floor: Some(0), posted: 25, debits_pending: 0, credits_pending: 0 },
    };
    let (state, a) = end_hold(posted, 30, HoldState::Posted, HoldAction::Reverse(25)).unwrap();
    assert_eq!((state, a.debit_after.posted, a.credit_after.posted), (HoldState::Voided, 100, 0));
    assert_eq!((a.debit.posted, a.credit.posted), (25, -25), "the journal's two entries");
    // The shop spent it meanwhile: the reversal would take it below its floor.
    let spent = Sides { credit: Balance { posted: 10, ..posted.credit }, ..posted };
    assert_eq!(
        end_hold(spent, 30, HoldState::Posted, HoldAction::Reverse(25)),
        Err(Refused::InsufficientFunds { available: 10, floor: 0, amount: 25 })
    );
    // Voided, then the operation succeeded after all.
    let voided = Sides {
        debit: Balance { floor: Some(0), posted: 100, debits_pending: 0, credits_pending: 0 },
        credit: Balance::new(Some(0)),
    };
    let (state, a) = end_hold(voided, 30, HoldState::Voided, HoldAction::Repost(30)).unwrap();
    assert_eq!((state, a.debit_after.posted, a.credit_after.posted), (HoldState::Posted, 70, 30));
    let empty = Sides { debit: Balance { posted: 20, ..voided.debit }, ..voided };
    assert_eq!(
        end_hold(empty, 30, HoldState::Voided, HoldAction::Repost(30)),
        Err(Refused::InsufficientFunds { available: 20, floor: 0, amount: 30 })
    );
    // Only a posted hold is reversed, only an ended unposted one posted again.
    for (state, action) in [
        (HoldState::Pending, HoldAction::Reverse(25)),
        (HoldState::Voided, HoldAction::Reverse(25)),
        (HoldState::Pending, HoldAction::Repost(30)),
        (HoldState::Posted, HoldAction::Repost(30)),
    ] {
        assert_eq!(end_hold(posted, 30, state, action), Err(Refused::NothingToCorrect(state)), "{action:?}");
    }
}

#[test]
fn hold_states_round_trip_their_names() {
    for state in [HoldState::Pending, HoldState::Posted, HoldState::Voided, HoldState::Expired] {
        assert_eq!(HoldState::parse(state.as_str()), Some(state));
    }
    assert_eq!(HoldState::parse("done"), None);
}

/// One step of a random history over three accounts: a wallet with a
/// floor of zero, a second one, and a system account without a floor.
#[derive(Clone, Debug)]
enum Step {
    Transfer { from: usize, to: usize, amount: i64, pending: bool },
    End { hold: usize, action: HoldAction },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 0..3usize, -5..200i64, any::<bool>())
            .prop_map(|(from, to, amount, pending)| Step::Transfer { from, to, amount, pending }),
        (
            0..8usize,
            prop_oneof![
                (-5..250i64).prop_map(HoldAction::Post),
                Just(HoldAction::Void),
                Just(HoldAction::Expire)
            ]
        )
            .prop_map(|(hold, action)| Step::End { hold, action }),
    ]
}

proptest! {
    /// Whatever is applied or refused: the accounts equal the sums of their
    /// entries, posted sums to zero, pending debits equal pending credits,
    /// and no account with a floor is ever below it.
    #[test]
    fn balances_are_their_entries_and_sum_to_zero(steps in prop::collection::vec(step(), 0..60)) {
        let mut accounts = [Balance::new(Some(0)), Balance::new(Some(0)), Balance::new(None)];
        let mut sums = [Delta::default(); 3];
        let mut holds: Vec<(usize, usize, i64, HoldState)> = Vec::new();
        for step in steps {
            let (from, to, result) = match step {
                Step::Transfer { from, to, amount, pending } => {
                    let result = transfer(Sides { debit: accounts[from], credit: accounts[to] }, amount, pending, from == to);
                    if pending && result.is_ok() {
                        holds.push((from, to, amount, HoldState::Pending));
                    }
                    (from, to, result)
                }
                Step::End { hold, action } => {
                    let Some(&(from, to, held, state)) = holds.get(hold) else { continue };
                    let result = end_hold(Sides { debit: accounts[from], credit: accounts[to] }, held, state, action)
                        .map(|(next, applied)| { holds[hold].3 = next; applied });
                    (from, to, result)
                }
            };
            let Ok(applied) = result else { continue };
            accounts[from] = applied.debit_after;
            accounts[to] = applied.credit_after;
            for (i, delta) in [(from, applied.debit), (to, applied.credit)] {
                sums[i].posted += delta.posted;
                sums[i].debits_pending += delta.debits_pending;
                sums[i].credits_pending += delta.credits_pending;
            }
        }
        for (account, sum) in accounts.iter().zip(sums) {
            prop_assert_eq!((account.posted, account.debits_pending, account.credits_pending),
                (sum.posted, sum.debits_pending, sum.credits_pending));
            if let Some(floor) = account.floor {
                prop_assert!(account.available().unwrap() >= floor);
            }
        }
        prop_assert_eq!(accounts.iter().map(|a| a.posted).sum::<i64>(), 0);
        prop_assert_eq!(
            accounts.iter().map(|a| a.debits_pending).sum::<i64>(),
            accounts.iter().map(|a| a.credits_pending).sum::<i64>()
        );
        let pending: i64 = holds.iter().filter(|h| h.3 == HoldState::Pending).map(|h| h.2).sum();
        prop_assert_eq!(accounts.iter().map(|a| a.debits_pending).sum::<i64>(), pending);
    }
}
