use super::*;

fn our(id: i64, reference: &str, status: OurStatus, amount: i64) -> OurRecord {
    OurRecord {
        operation_id: id,
        reference: reference.into(),
        status,
        amount: Some(amount),
        provider_ref: None,
    }
}

fn their(id: &str, reference: &str, status: TheirStatus, amount: i64) -> TheirRecord {
    TheirRecord { id: id.into(), reference: Some(reference.into()), status, amount: Some(amount) }
}

fn kinds(found: &[Discrepancy]) -> Vec<(DiscrepancyKind, Option<&str>)> {
    found.iter().map(|d| (d.kind, d.reference.as_deref())).collect()
}

#[test]
fn agreeing_sides_have_no_discrepancy() {
    let ours = [our(1, "a", OurStatus::Succeeded, 100), our(2, "b", OurStatus::Failed, 200)];
    let theirs =
        [their("ch_1", "a", TheirStatus::Succeeded, 100), their("ch_2", "b", TheirStatus::Failed, 200)];
    assert_eq!(compare(&ours, &theirs), vec![]);
    // A failure the provider has no record of is agreement too (it never acted).
    assert_eq!(compare(&[our(3, "c", OurStatus::Failed, 1)], &[]), vec![]);
}

#[test]
fn each_kind_is_found_once() {
    let ours = [
        our(1, "gone", OurStatus::Succeeded, 100),
        our(2, "amount", OurStatus::Succeeded, 100),
        our(3, "we-failed", OurStatus::Failed, 100),
        our(4, "they-failed", OurStatus::Succeeded, 100),
        our(5, "twice", OurStatus::Succeeded, 100),
        our(6, "open", OurStatus::Open, 100),
    ];
    let theirs = [
        their("ch_a", "amount", TheirStatus::Succeeded, 150),
        their("ch_w", "we-failed", TheirStatus::Succeeded, 100),
        their("ch_t", "they-failed", TheirStatus::Failed, 100),
        their("ch_d1", "twice", TheirStatus::Succeeded, 100),
        their("ch_d2", "twice", TheirStatus::Succeeded, 100),
        their("ch_o", "open", TheirStatus::Succeeded, 999),
        their("ch_x", "stranger", TheirStatus::Succeeded, 100),
        TheirRecord { id: "ch_n".into(), reference: None, status: TheirStatus::Succeeded, amount: None },
    ];
    let found = compare(&ours, &theirs);
    assert_eq!(
        kinds(&found),
        vec![
            (DiscrepancyKind::MissingAtProvider, Some("gone")),
            (DiscrepancyKind::MissingHere, None),
            (DiscrepancyKind::MissingHere, Some("stranger")),
            (DiscrepancyKind::AmountMismatch, Some("amount")),
            (DiscrepancyKind::StatusMismatch, Some("they-failed")),
            (DiscrepancyKind::StatusMismatch, Some("we-failed")),
            (DiscrepancyKind::DuplicateAtProvider, Some("twice")),
        ]
    );
    let amount = found.iter().find(|d| d.kind == DiscrepancyKind::AmountMismatch).unwrap();
    assert_eq!(amount.detail, "amount: ours 100, provider 150 (ch_a)");
    assert_eq!(amount.operation_id, Some(2));
    let twice = found.iter().find(|d| d.kind == DiscrepancyKind::DuplicateAtProvider).unwrap();
    assert_eq!(twice.provider_ref.as_deref(), Some("ch_d1,ch_d2"));
}

#[test]
fn a_failed_attempt_beside_the_success_is_no_discrepancy() {
    // A declined first charge and a successful second one under a new key.
    let ours = [our(1, "a", OurStatus::Succeeded, 100)];
    let theirs =
        [their("ch_1", "a", TheirStatus::Failed, 100), their("ch_2", "a", TheirStatus::Succeeded, 100)];
    assert_eq!(compare(&ours, &theirs), vec![]);
}

#[test]
fn a_missing_amount_is_not_a_mismatch() {
    let ours = [OurRecord { amount: None, ..our(1, "a", OurStatus::Succeeded, 0) }];
    let theirs = [their("ch_1", "a", TheirStatus::Succeeded, 100)];
    assert_eq!(compare(&ours, &theirs), vec![]);
    let processing = [their("ch_1", "a", TheirStatus::Other("processing".into()), 100)];
    let found = compare(&[our(1, "a", OurStatus::Succeeded, 100)], &processing);
    assert_eq!(kinds(&found), vec![(DiscrepancyKind::StatusMismatch, Some("a"))]);
    assert_eq!(found[0].detail, "ours succeeded, provider processing");
}
