//! The generator's promises: one seed, one schedule; every fault over before the last fifth.

use super::*;

fn shape() -> Shape {
    Shape {
        storm: Duration::from_secs(20),
        faults: 4,
        long_outage: false,
        only: None,
    }
}

#[test]
fn one_seed_one_schedule() {
    let a = Schedule::generate(7, 3, Deployment::ScaleOut, shape());
    let b = Schedule::generate(7, 3, Deployment::ScaleOut, shape());
    assert_eq!(a.to_string(), b.to_string());
    let c = Schedule::generate(7, 4, Deployment::ScaleOut, shape());
    assert_ne!(a.to_string(), c.to_string());
}

#[test]
fn faults_end_before_the_last_fifth() {
    for i in 0..200 {
        for d in [
            Deployment::Embedded,
            Deployment::ScaleOut,
            Deployment::Sentinel,
            Deployment::Cluster,
        ] {
            let s = Schedule::generate(1, i, d, shape());
            for f in &s.faults {
                assert!(f.at >= Duration::from_secs(1), "{s}");
                assert!((f.at + f.hold).as_secs_f64() <= 16.0 + 1e-9, "{s}");
            }
            assert!(on_replicas_n(&s) <= 2, "{s}");
            assert!(restores_n(&s) <= 1, "{s}");
            assert!(
                clock_steps_n(&s) <= usize::from(d == Deployment::Embedded),
                "{s}"
            );
            assert_eq!(
                s.faults.len() - on_replicas_n(&s) - restores_n(&s) - clock_steps_n(&s),
                4,
                "{s}"
            );
            if d == Deployment::Sentinel {
                assert!((1..=2).contains(&s.replicas), "{s}");
            }
        }
    }
}

fn restores_n(s: &Schedule) -> usize {
    s.faults
        .iter()
        .filter(|f| f.target == Target::Snapshot)
        .count()
}

fn clock_steps_n(s: &Schedule) -> usize {
    s.faults
        .iter()
        .filter(|f| f.target == Target::Clock)
        .count()
}

/// About half the scale-out schedules restore Redis from a snapshot, on top of their faults;
/// `--only redis-snapshot` keeps that fault alone.
#[test]
fn scale_out_schedules_also_restore_snapshots() {
    let restored = (0..100)
        .filter(|&i| restores_n(&Schedule::generate(9, i, Deployment::ScaleOut, shape())) == 1)
        .count();
    assert!((25..=75).contains(&restored), "{restored} of 100");
    for d in [Deployment::Embedded, Deployment::Sentinel] {
        assert!((0..100).all(|i| restores_n(&Schedule::generate(9, i, d, shape())) == 0));
    }
    let only = Shape {
        only: Some(Target::Snapshot),
        ..shape()
    };
    let s = Schedule::generate(9, 0, Deployment::ScaleOut, only);
    assert!(s.faults.iter().all(|f| f.kind == Kind::Rewind), "{s}");
}

fn on_replicas_n(s: &Schedule) -> usize {
    s.faults
        .iter()
        .filter(|f| f.target == Target::Replica)
        .count()
}

/// Faults on replicas came after the others: a seed's faults on everything else are the
/// ones it drew before, and a campaign reaches every kind on a replica.
#[test]
fn sentinel_schedules_also_hit_replicas() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut both = [false; 2];
    for i in 0..100 {
        let s = Schedule::generate(9, i, Deployment::Sentinel, shape());
        kinds.extend(
            s.faults
                .iter()
                .filter(|f| f.target == Target::Replica)
                .map(|f| f.kind),
        );
        both[usize::from(s.replicas) - 1] = true;
        let only = Shape {
            only: Some(Target::Primary),
            ..shape()
        };
        let p = Schedule::generate(9, i, Deployment::Sentinel, only);
        assert!(p.faults.iter().all(|f| f.target == Target::Primary), "{p}");
    }
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    assert_eq!(both, [true, true]);
}

/// Cluster schedules hit the master serving the campaign, a third of those with its replica
/// lagging first (100–800 ms), and `--only redis-master` keeps those faults alone.
#[test]
fn cluster_schedules_move_masters() {
    let mut lagging = 0;
    for i in 0..50 {
        let s = Schedule::generate(9, i, Deployment::Cluster, shape());
        for f in s.faults.iter().filter(|f| f.target == Target::Master) {
            assert!(
                f.hold >= Duration::from_secs_f64(2.5) || f.kind == Kind::Handover,
                "{s}"
            );
            if let Kind::KillLagging(ms) = f.kind {
                assert!((100..=800).contains(&ms), "{s}");
                lagging += 1;
            }
        }
        let only = Shape {
            only: Some(Target::Master),
            ..shape()
        };
        let m = Schedule::generate(9, i, Deployment::Cluster, only);
        assert!(m.faults.iter().all(|f| f.target == Target::Master), "{m}");
    }
    assert!(lagging > 10, "{lagging} lagging kills in 50 schedules");
}
