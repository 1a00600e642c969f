//! Throughput over time: the storm's live counters sampled at a fixed interval, for the HTML
//! report's throughput plot. Sampling reads three relaxed atomics per tick, off the request
//! path.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::storm::Live;

/// Counters at `t_s` seconds after the storm started (cumulative).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub done: u64,
    pub won: u64,
    pub errors: u64,
}

/// Samples `live` every `every` until the storm finishes; the last sample is taken at the end.
pub async fn record(live: Arc<Live>, every: Duration) -> Vec<Sample> {
    let sample = |live: &Live| Sample {
        t_s: live.started.elapsed().as_secs_f64(),
        done: live.done.load(Ordering::Relaxed),
        won: live.won.load(Ordering::Relaxed),
        errors: live.errors.load(Ordering::Relaxed),
    };
    let mut samples = vec![Sample {
        t_s: 0.0,
        done: 0,
        won: 0,
        errors: 0,
    }];
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let finished = live.finished.load(Ordering::Acquire);
        samples.push(sample(&live));
        if finished {
            return samples;
        }
    }
}

/// The sampling interval for a storm expected to take about `expected`: ~100 points, none
/// shorter than 50 ms (shorter intervals plot scheduling noise, not throughput).
pub fn interval_for(expected: Option<Duration>) -> Duration {
    let ms = expected.map_or(100, |d| (d.as_millis() / 100) as u64);
    Duration::from_millis(ms.clamp(50, 1000))
}
