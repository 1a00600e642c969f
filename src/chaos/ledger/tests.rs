use super::*;

fn win(id: &str, user: &str, qty: u64) -> Win {
    Win {
        user: user.into(),
        order_id: id.into(),
        qty,
        codes: None,
        key: None,
        sent: std::time::Instant::now(),
        answered: std::time::Instant::now(),
    }
}

fn row(id: &str, user: &str, qty: i64, state: &str) -> Row {
    Row {
        order_id: id.into(),
        user_id: user.into(),
        qty,
        codes: None,
        state: state.into(),
        pay_by: None,
        resolved_at: None,
    }
}

fn none() -> HashSet<String> {
    HashSet::new()
}

#[test]
fn every_won_is_one_row_as_answered() {
    let wins = [
        win("c-1", "u1", 1),
        win("c-2", "u2", 2),
        win("c-3", "u3", 1),
    ];
    let rows = vec![
        row("c-1", "u1", 1, "active"),
        row("c-2", "u2", 1, "active"),
        row("c-4", "u4", 1, "active"),
    ];
    let f = check(&wins, &rows, (10, 2), &none(), false);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].orders, vec!["c-3"]);
    assert_eq!(f[1].orders, vec!["c-2"]);
    let rows = vec![row("c-1", "u1", 1, "active"), row("c-1", "u1", 1, "active")];
    assert_eq!(
        check(&wins[..1], &rows, (10, 2), &none(), false)[0].orders,
        vec!["c-1"]
    );
    assert!(check(&wins[..1], &rows[..1], (10, 2), &none(), false).is_empty());
}

#[test]
fn oversell_shared_codes_and_limits_are_found_in_live_rows_only() {
    let mut rows = vec![
        row("c-1", "u1", 2, "active"),
        row("c-2", "u2", 2, "active"),
        row("c-3", "u1", 1, "cancelled"),
    ];
    rows[0].codes = Some(r#"["A","B"]"#.into());
    rows[1].codes = Some(r#"["C","D"]"#.into());
    rows[2].codes = Some(r#"["A"]"#.into());
    assert!(check(&[], &rows, (4, 2), &none(), false).is_empty());
    let f = check(&[], &rows, (3, 2), &none(), false);
    assert!(f[0].what.contains("4 live units of a total of 3"), "{f:?}");
    rows[2].state = "pending".into();
    let f = check(&[], &rows, (5, 3), &none(), false);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].orders, vec!["c-1", "c-3"]);
    rows[2].codes = Some(r#"["E"]"#.into());
    let f = check(&[], &rows, (5, 2), &none(), false);
    assert!(f[0].what.contains("over the limit of 2"), "{f:?}");
}

#[test]
fn resolutions_are_held_to_the_deadline_and_the_answers() {
    let mut ok = row("c-1", "u1", 1, "confirmed");
    (ok.pay_by, ok.resolved_at) = (Some(100), Some(99));
    let mut late = row("c-2", "u2", 1, "confirmed");
    (late.pay_by, late.resolved_at) = (Some(100), Some(100));
    let mut early = row("c-3", "u3", 1, "expired");
    (early.pay_by, early.resolved_at) = (Some(100), Some(50));
    let pending = row("c-4", "u4", 1, "pending");
    let rows = vec![ok, late, early, pending];
    let f = check(&[], &rows, (10, 1), &none(), true);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].orders, vec!["c-2", "c-3", "c-4"]);
    let answered: HashSet<String> = ["c-1".to_owned(), "c-3".to_owned()].into();
    let f = check(&[], &rows[..1], (10, 1), &answered, true);
    assert_eq!(f[0].orders, vec!["c-3"], "{f:?}");
}

fn restock(units: u64, ok: bool, detail: &str) -> EventRecord {
    use crate::bench::event_spec::{EventSpec, When};
    EventRecord {
        spec: EventSpec {
            when: When::After(1.0),
            action: Action::Restock(units),
        },
        sent_s: Some(1.0),
        done_s: Some(1.1),
        ok,
        detail: detail.into(),
        done_at: None,
        cancelled: vec![],
    }
}

#[test]
fn the_total_counts_each_answered_restock_once() {
    let events = [
        restock(10, true, "200 OK (attempt 2)"),
        restock(5, false, "409 Conflict: {}"),
        restock(7, false, &format!("{UNANSWERED}: 503")),
    ];
    assert!(supply(100, &events, 110).is_none());
    assert!(supply(100, &events, 117).is_none());
    assert!(
        supply(100, &events, 120).is_some(),
        "a restock applied twice"
    );
    assert!(
        supply(100, &events, 105).is_some(),
        "an answered restock missing"
    );
}
