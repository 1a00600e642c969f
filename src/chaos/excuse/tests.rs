use super::*;

fn expired_row(id: &str, user: &str, pay_by: i64) -> Row {
    Row {
        order_id: id.into(),
        user_id: user.into(),
        qty: 1,
        codes: None,
        state: "expired".into(),
        pay_by: Some(pay_by),
        resolved_at: None,
    }
}

fn returned(user: &str, pay_by: i64) -> Returned {
    Returned {
        user: user.into(),
        pay_by: Some(pay_by),
        late: false,
    }
}

/// Order 7 is u1's in the ledger (pay_by 5,000); the restored gate issued the number again,
/// and the ledger refused the `confirmed` of that other order. A confirm whose 200 returned
/// that order was about it; one that returned the ledger's own order is held to the ledger.
#[test]
fn only_a_200_returning_the_refused_order_is_excused() {
    let mut e = Excused {
        restored: true,
        ..Excused::default()
    };
    e.rows.insert("c-7".into(), expired_row("c-7", "u1", 5_000));
    let refused = |user: &str, pay_by: i64| -> HashSet<Contradicted> {
        [("c-7".to_owned(), user.to_owned(), Some(pay_by))].into()
    };
    // Reissued to another buyer.
    assert!(e.about_reissued("c-7", &returned("u2", 9_000), &refused("u2", 9_000)));
    // Reissued to the same buyer: another order all the same (its own pay_by).
    assert!(e.about_reissued("c-7", &returned("u1", 9_000), &refused("u1", 9_000)));
    // The 200 returned the ledger's own order: its confirm must hold, whatever was refused.
    assert!(!e.about_reissued("c-7", &returned("u1", 5_000), &refused("u1", 5_000)));
    assert!(!e.about_reissued("c-7", &returned("u1", 5_000), &refused("u2", 9_000)));
    // Without the ledger's refusal of that very order, nothing says it went back.
    assert!(!e.about_reissued("c-7", &returned("u2", 9_000), &HashSet::new()));
    assert!(!e.about_reissued("c-7", &returned("u2", 9_000), &refused("u2", 8_000)));
    // Another number's refusal says nothing of this one.
    e.rows.insert("c-8".into(), expired_row("c-8", "u1", 5_000));
    assert!(!e.about_reissued("c-8", &returned("u2", 9_000), &refused("u2", 9_000)));
    // A number the snapshot knew is never issued again.
    e.known_ids.insert("c-7".into());
    assert!(!e.about_reissued("c-7", &returned("u2", 9_000), &refused("u2", 9_000)));
}
