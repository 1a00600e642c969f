//! The wait before a failed delivery's next attempt: doubling from one second up to a
//! ceiling, each wait drawn between half and all of it ("equal jitter"), so receivers that
//! come back are not met by every sink at the same instant.

use std::time::Duration;

use rand::Rng;

/// The wait after the `attempt`-th failure (1-based), at most `max`.
pub fn after(attempt: u32, max: Duration) -> Duration {
    let full = Duration::from_secs(1)
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(30))
        .min(max);
    let half = full / 2;
    half + full
        .saturating_sub(half)
        .mul_f64(rand::thread_rng().gen::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_up_to_the_ceiling() {
        let max = Duration::from_secs(300);
        for _ in 0..100 {
            let first = after(1, max);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
            let fifth = after(5, max);
            assert!(fifth >= Duration::from_secs(8) && fifth <= Duration::from_secs(16));
            let late = after(40, max);
            assert!(late >= Duration::from_secs(150) && late <= max);
        }
    }
}
