use super::*;

fn grant(name: &str, fence: u64, sent: u64, answered: u64, end: u64, t0: Instant) -> Grant {
    let at = |ms| t0 + Duration::from_millis(ms);
    Grant {
        name: name.into(),
        fence,
        sent: at(sent),
        answered: at(answered),
        end: at(end),
        extended: Vec::new(),
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
    assert!(check(&backwards, false, &[])[0]
        .what
        .contains("answered before"));
    let overlap = History {
        grants: vec![
            grant("a", 1, 0, 5, 400, t0),
            grant("a", 2, 100, 150, 500, t0),
        ],
        ..History::default()
    };
    assert!(check(&overlap, true, &[])[0]
        .what
        .contains("could have ended"));
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
fn a_restore_forgets_only_the_leases_the_replaced_redis_decided() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let window = crate::chaos::rewind::Window {
        from: ms(1_000),
        from_wall: std::time::SystemTime::now(),
        killed: ms(1_500),
        refused_after: true,
    };
    // Fence 2 was granted by the Redis the restore replaced: the restored one may not know
    // it, so fence 3 granted inside its lease is allowed. Fence 1 was granted before the
    // snapshot and runs through the restore: fence 3 granted inside it is found. Fence 4 was
    // granted after the restore inside fence 3's lease: found too.
    let mut h = History {
        grants: vec![
            grant("a", 1, 0, 5, 1_650, t0),
            grant("a", 2, 1_100, 1_110, 2_000, t0),
            grant("a", 3, 1_600, 1_610, 3_000, t0),
            grant("a", 4, 1_700, 1_710, 4_000, t0),
        ],
        ..History::default()
    };
    let what = |h: &History| -> Vec<String> {
        check(h, true, &[window])
            .into_iter()
            .map(|f| f.what)
            .collect()
    };
    let found = what(&h);
    assert_eq!(found.len(), 3, "{found:?}");
    for (granted, during) in [(2, 1), (3, 1), (4, 3)] {
        let text = format!("fence {granted} granted");
        assert!(
            found
                .iter()
                .any(|w| w.contains(&text) && w.contains(&format!("fence {during}"))),
            "{found:?}"
        );
    }
    // An extend the replaced Redis answered makes fence 1's lease forgettable too.
    h.grants[0].extended.push((ms(1_200), ms(1_210)));
    let found = what(&h);
    assert_eq!(found.len(), 1, "{found:?}");
}
