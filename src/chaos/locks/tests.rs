use super::*;

fn grant(name: &str, fence: u64, sent: u64, answered: u64, end: u64, t0: Instant) -> Grant {
    let at = |ms| t0 + Duration::from_millis(ms);
    Grant {
        name: name.into(),
        fence,
        sent: at(sent),
        answered: at(answered),
        end: at(end),
    }
}

fn write(fence: u64, sent: u64, answered: u64, accepted: bool, t0: Instant) -> Write {
    Write {
        name: "a".into(),
        fence,
        sent: t0 + Duration::from_millis(sent),
        answered: t0 + Duration::from_millis(answered),
        accepted,
    }
}

#[test]
fn a_clean_history_passes() {
    let t0 = Instant::now();
    let h = History {
        grants: vec![
            grant("a", 1, 0, 5, 100, t0),
            grant("a", 2, 90, 120, 500, t0),
            grant("b", 1, 0, 5, 100, t0),
        ],
        writes: vec![
            write(1, 10, 12, true, t0),
            write(2, 130, 131, true, t0),
            write(1, 600, 601, false, t0),
        ],
        ..History::default()
    };
    assert!(
        check(&h, true, &[]).is_empty(),
        "{:?}",
        check(&h, true, &[])
    );
}

#[test]
fn each_broken_promise_is_found() {
    let t0 = Instant::now();
    let twice = History {
        grants: vec![
            grant("a", 7, 0, 5, 100, t0),
            grant("a", 7, 200, 205, 300, t0),
        ],
        ..History::default()
    };
    assert!(check(&twice, false, &[])[0].what.contains("granted twice"));
    let backwards = History {
        grants: vec![
            grant("a", 9, 0, 5, 100, t0),
            grant("a", 8, 200, 205, 300, t0),
        ],
        ..History::default()
    };
    assert!(check(&backwards, false, &[])[0].what.contains("answered before"));
    let overlap = History {
        grants: vec![
            grant("a", 1, 0, 5, 400, t0),
            grant("a", 2, 100, 150, 500, t0),
        ],
        ..History::default()
    };
    assert!(check(&overlap, true, &[])[0].what.contains("could have ended"));
    assert!(
        check(&overlap, false, &[]).is_empty(),
        "not promised after a failover"
    );
    let stale = History {
        writes: vec![write(2, 0, 5, true, t0), write(1, 10, 12, true, t0)],
        ..History::default()
    };
    assert!(check(&stale, true, &[])[0]
        .what
        .contains("accepted fence 1 after"));
}

#[test]
fn an_overlap_is_found_by_the_order_of_requests_whatever_the_fences() {
    let t0 = Instant::now();
    // Fence 5 asked for after fence 9 was answered, and granted inside its lease: the fences
    // went backwards (found as such) and the leases overlap (found by the requests' order).
    let h = History {
        grants: vec![
            grant("a", 9, 0, 5, 800, t0),
            grant("a", 5, 100, 120, 900, t0),
        ],
        ..History::default()
    };
    let f = check(&h, true, &[]);
    assert!(
        f.iter().any(|f| f.what.contains("answered before")),
        "{f:?}"
    );
    assert!(
        f.iter().all(|f| !f.what.contains("could have ended")),
        "{f:?}"
    );
    // Within the slack of whole milliseconds: not an overlap.
    let h = History {
        grants: vec![grant("a", 1, 0, 5, 100, t0), grant("a", 2, 50, 97, 500, t0)],
        ..History::default()
    };
    assert!(
        check(&h, true, &[]).is_empty(),
        "{:?}",
        check(&h, true, &[])
    );
}

#[test]
fn a_restore_forgets_only_the_leases_alive_during_it() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + std::time::Duration::from_millis(n);
    let window = crate::chaos::rewind::Window {
        from: ms(1_000),
        from_wall: std::time::SystemTime::now(),
        to: ms(1_500),
    };
    // Fence 2's lease ran through the restore: the restored Redis may not know it, so fence 3
    // granted inside it is allowed. Fence 1's ended before the snapshot and fence 4 was
    // granted after the restore inside fence 3's lease: that overlap is still found.
    let h = History {
        grants: vec![
            grant("a", 1, 0, 5, 900, t0),
            grant("a", 2, 950, 960, 2_000, t0),
            grant("a", 3, 1_600, 1_610, 3_000, t0),
            grant("a", 4, 1_700, 1_710, 4_000, t0),
        ],
        ..History::default()
    };
    let f = check(&h, true, &[window]);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].what.contains("fence 4 granted"), "{f:?}");
}
