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
        ] {
            let s = Schedule::generate(1, i, d, shape());
            for f in &s.faults {
                assert!(f.at >= Duration::from_secs(1), "{s}");
                assert!((f.at + f.hold).as_secs_f64() <= 16.0 + 1e-9, "{s}");
            }
            assert_eq!(s.faults.len(), 4);
        }
    }
}
