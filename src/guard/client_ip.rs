//! Which IP a request comes from, for the per-IP limits.
//!
//! By default it is the socket's peer: a header can be written by anyone, so believing it
//! would let each request pick its own bucket. Only when the peer is a configured trusted
//! proxy is the proxy header read, from the right (the hop the proxy itself appended) towards
//! the left, skipping further trusted proxies; the first address not trusted is the client.
//! IPv6 clients are bucketed by their /64, since one host usually owns a whole /64.

use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// An IP or CIDR trusted to report the client's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedProxy(pub IpNet);

impl FromStr for TrustedProxy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Self(net.trunc()));
        }
        s.parse::<IpAddr>()
            .map(|ip| Self(IpNet::from(ip)))
            .map_err(|_| format!("{s:?} is neither an IP address nor a CIDR such as 10.0.0.0/8"))
    }
}

#[derive(Debug, Clone)]
pub struct ClientIpPolicy {
    trusted: Vec<IpNet>,
    header: HeaderName,
}

impl ClientIpPolicy {
    pub fn new(trusted: &[TrustedProxy], header: &str) -> Result<Self, String> {
        let header = HeaderName::from_str(&header.to_ascii_lowercase())
            .map_err(|_| format!("{header:?} is not a valid header name"))?;
        Ok(Self {
            trusted: trusted.iter().map(|t| t.0).collect(),
            header,
        })
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// The client's address as the limiter keys it.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        bucket(self.client(peer.to_canonical(), headers))
    }

    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let hops: Vec<&str> = headers
            .get_all(&self.header)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => {
                    client = ip.to_canonical();
                    if !self.trusts(client) {
                        break;
                    }
                }
                // Garbage in the chain: stop at the last hop we could read.
                Err(_) => break,
            }
        }
        client
    }
}

/// IPv4 as is; IPv6 truncated to its /64.
pub(crate) fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn policy(trusted: &[&str]) -> ClientIpPolicy {
        let t: Vec<TrustedProxy> = trusted.iter().map(|s| s.parse().unwrap()).collect();
        ClientIpPolicy::new(&t, "X-Forwarded-For").unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn header_ignored_unless_the_peer_is_trusted() {
        let h = headers(&["1.2.3.4"]);
        assert_eq!(policy(&[]).resolve(ip("9.9.9.9"), &h), ip("9.9.9.9"));
        assert_eq!(
            policy(&["10.0.0.0/8"]).resolve(ip("9.9.9.9"), &h),
            ip("9.9.9.9")
        );
        assert_eq!(
            policy(&["10.0.0.0/8"]).resolve(ip("10.1.1.1"), &h),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn rightmost_untrusted_hop_wins() {
        let p = policy(&["10.0.0.0/8", "192.168.1.1"]);
        // The client forged the first entry; the proxies appended the rest.
        let h = headers(&["6.6.6.6, 1.2.3.4", "192.168.1.1"]);
        assert_eq!(p.resolve(ip("10.0.0.2"), &h), ip("1.2.3.4"));
        let all_trusted = headers(&["10.0.0.9"]);
        assert_eq!(p.resolve(ip("10.0.0.2"), &all_trusted), ip("10.0.0.9"));
        let garbage = headers(&["1.2.3.4, nonsense"]);
        assert_eq!(p.resolve(ip("10.0.0.2"), &garbage), ip("10.0.0.2"));
        assert_eq!(p.resolve(ip("10.0.0.2"), &HeaderMap::new()), ip("10.0.0.2"));
    }

    #[test]
    fn ipv6_by_prefix_and_mapped_v4_as_v4() {
        let p = policy(&[]);
        let h = HeaderMap::new();
        assert_eq!(
            p.resolve(ip("2001:db8::1"), &h),
            p.resolve(ip("2001:db8::ffff"), &h)
        );
        assert_eq!(p.resolve(ip("::ffff:1.2.3.4"), &h), ip("1.2.3.4"));
        assert!("not-an-ip".parse::<TrustedProxy>().is_err());
        assert_eq!(
            "127.0.0.1".parse::<TrustedProxy>().unwrap().0.prefix_len(),
            32
        );
    }
}
