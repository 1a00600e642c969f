//! One client's share: at most `max` places (requests in flight, or open connections) per
//! client address, so one machine cannot hold what the crowd needs.
//!
//! The global bounds (`--max-in-flight`, `--max-connections`) protect the service; they do
//! not protect buyers from each other: one address that keeps thousands of stalled requests
//! open takes every place and every genuine claim is refused. nginx answers this with
//! `limit_conn`, Envoy with per-downstream connection limits; this is the same idea.
//!
//! A client is an IPv4 address or an IPv6 /64 (one subscriber usually owns a whole /64).
//! Loopback peers are not held by default: on 127.0.0.1 the only peer is a local proxy or a
//! load generator, which speaks for many clients. Neither are the `--trusted-proxy` addresses:
//! a proxy speaks for every buyer behind it (the in-flight share then keys on the address the
//! proxy reports; a proxy that reports none is not held).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ipnet::IpNet;
use parking_lot::Mutex;

const SHARDS: usize = 16;

/// The key of one client: an IPv4 address, or the /64 of an IPv6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(u128);

impl ClientKey {
    pub fn of(ip: IpAddr) -> Self {
        match super::client_ip::bucket(ip.to_canonical()) {
            IpAddr::V4(v4) => ClientKey(u128::from(u32::from(v4)) | (1 << 127)),
            IpAddr::V6(v6) => ClientKey(u128::from(v6)),
        }
    }

    fn shard(self) -> usize {
        let h = (self.0 ^ (self.0 >> 64)) as u64;
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
    }
}

/// Places per client, up to `max` each (0: no limit).
#[derive(Debug)]
pub struct Share {
    max: u32,
    hold_loopback: bool,
    /// Addresses never held: the trusted proxies.
    exempt: Vec<IpNet>,
    shards: Vec<Mutex<HashMap<ClientKey, u32>>>,
    refused: AtomicU64,
}

/// A place taken; dropping it gives the place back.
#[derive(Debug)]
pub struct Taken {
    share: Arc<Share>,
    key: ClientKey,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut shard = self.share.shards[self.key.shard()].lock();
        if let Some(n) = shard.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

/// The client already holds its whole share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl Share {
    pub fn new(max: u32, hold_loopback: bool, exempt: Vec<IpNet>) -> Arc<Self> {
        Arc::new(Self {
            max,
            hold_loopback,
            exempt,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            refused: AtomicU64::new(0),
        })
    }

    /// A place for a client at `ip`: `Ok(None)` when the client is not held (no limit,
    /// loopback, or no address known), `Err(Full)` (counted) when its share is taken.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Option<Taken>, Full> {
        let ip = ip.to_canonical();
        if self.max == 0
            || ip.is_unspecified()
            || (ip.is_loopback() && !self.hold_loopback)
            || self.exempt.iter().any(|n| n.contains(&ip))
        {
            return Ok(None);
        }
        let key = ClientKey::of(ip);
        let mut shard = self.shards[key.shard()].lock();
        let n = shard.entry(key).or_insert(0);
        if *n >= self.max {
            drop(shard);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Full);
        }
        *n += 1;
        Ok(Some(Taken {
            share: self.clone(),
            key,
        }))
    }

    /// Places refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Clients holding at least one place.
    pub fn clients(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_holds_at_most_its_share_and_gets_it_back() {
        let s = Share::new(2, false, Vec::new());
        let a = s.take(ip("10.0.0.1")).unwrap().unwrap();
        let _b = s.take(ip("10.0.0.1")).unwrap().unwrap();
        assert_eq!(s.take(ip("10.0.0.1")).unwrap_err(), Full);
        assert!(s.take(ip("10.0.0.2")).unwrap().is_some(), "another client");
        drop(a);
        assert!(s.take(ip("10.0.0.1")).unwrap().is_some());
        assert_eq!(s.refused(), 1);
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let s = Share::new(1, false, Vec::new());
        let _a = s.take(ip("2001:db8:1:2::1")).unwrap().unwrap();
        assert!(s.take(ip("2001:db8:1:2:ffff::9")).is_err(), "same /64");
        assert!(
            s.take(ip("2001:db8:1:3::1")).unwrap().is_some(),
            "another /64"
        );
        let _m = s.take(ip("::ffff:10.1.1.1")).unwrap().unwrap();
        assert!(s.take(ip("10.1.1.1")).is_err(), "a mapped IPv4 is the IPv4");
    }

    #[test]
    fn a_trusted_proxy_is_never_held() {
        let s = Share::new(1, false, vec!["10.0.0.0/8".parse().unwrap()]);
        let _a = s.take(ip("10.1.2.3")).unwrap();
        assert!(s.take(ip("10.1.2.3")).unwrap().is_none());
        let _b = s.take(ip("11.0.0.1")).unwrap().unwrap();
        assert!(s.take(ip("11.0.0.1")).is_err());
    }

    #[test]
    fn loopback_is_held_only_when_asked() {
        let free = Share::new(1, false, Vec::new());
        assert!(free.take(ip("127.0.0.1")).unwrap().is_none());
        let held = Share::new(1, true, Vec::new());
        let _a = held.take(ip("127.0.0.1")).unwrap().unwrap();
        assert!(held.take(ip("127.0.0.1")).is_err());
    }

    #[test]
    fn every_place_is_given_back_under_contention() {
        let s = Share::new(3, false, Vec::new());
        std::thread::scope(|t| {
            for _ in 0..8 {
                let s = s.clone();
                t.spawn(move || {
                    for i in 0..5000 {
                        let held = s.take(ip(&format!("10.0.{}.1", i % 7)));
                        if let Ok(h) = held {
                            std::hint::black_box(&h);
                        }
                    }
                });
            }
        });
        assert_eq!(s.clients(), 0);
    }
}
