//! Webhooks ([OJS webhooks]): what a subscription may name, which events it takes, how a
//! delivery is signed, when a failed one is tried again, and which addresses a delivery may
//! reach. No I/O: the deliverer is `broker::webhooks`.
//!
//! - **Filters**: an exact event type (`job.completed`), a prefix (`job.*`), or `*`.
//! - **Signature**: `X-OJS-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`
//!   with `X-OJS-Timestamp: <unix seconds>`: a receiver recomputes it over the raw body and
//!   refuses stale timestamps (replays).
//! - **Retries**: at once, then after 30 s, 2 min, 10 min, 1 h, 4 h, 12 h and 24 h; after the
//!   last one the subscription is paused (and resumes from the same event).
//! - **Addresses**: a delivery may reach only public unicast addresses unless the operator
//!   allows private ones: not loopback, private (RFC 1918, unique local), link-local, CGNAT,
//!   unspecified, multicast, broadcast, documentation or benchmarking ranges, nor IPv4-mapped
//!   forms of those. Checked on the resolved address of every connection, so a name that
//!   resolves to a public address when checked and a private one later (DNS rebinding) is
//!   refused too.
//!
//! [OJS webhooks]: https://github.com/openjobspec/spec/blob/main/spec/ojs-webhooks.md

pub mod secret;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::wire::Violation;

/// Most filters of one subscription.
pub const MAX_FILTERS: usize = 100;
/// Longest URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Longest secret, in bytes.
pub const MAX_SECRET_BYTES: usize = 1024;

/// The waits before each retry of a failed delivery: the first retry is at once, the last
/// after a day. A delivery that fails once more is not retried: the subscription pauses.
pub const RETRY_DELAYS: [Duration; 8] = [
    Duration::ZERO,
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3_600),
    Duration::from_secs(4 * 3_600),
    Duration::from_secs(12 * 3_600),
    Duration::from_secs(24 * 3_600),
];

/// The wait before attempt `failed + 1`, after `failed` failed attempts; `None`: give up.
pub fn retry_delay(failed: u32) -> Option<Duration> {
    let index = usize::try_from(failed).ok()?.checked_sub(1)?;
    RETRY_DELAYS.get(index).copied()
}

/// The event types and prefixes of a subscription's filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// `*` was given: every event.
    pub all: bool,
    /// Exact types.
    pub types: Vec<String>,
    /// Prefixes, with their dot (`job.` for `job.*`).
    pub prefixes: Vec<String>,
}

impl Filters {
    /// Reads stored (valid) filters.
    pub fn of(filters: &[String]) -> Filters {
        let mut out = Filters::default();
        for f in filters {
            if f == "*" {
                out.all = true;
            } else if let Some(prefix) = f.strip_suffix('*') {
                out.prefixes.push(prefix.to_owned());
            } else {
                out.types.push(f.clone());
            }
        }
        out
    }

    /// Whether an event of `event_type` passes.
    pub fn matches(&self, event_type: &str) -> bool {
        self.all
            || self.types.iter().any(|t| t == event_type)
            || self
                .prefixes
                .iter()
                .any(|p| event_type.starts_with(p.as_str()))
    }
}

/// Checks a subscription's `events`: 1 to [`MAX_FILTERS`] filters, each `*`, `name.*` or a
/// dotted lowercase event type.
pub fn check_filters(filters: &[String]) -> Result<(), Violation> {
    if filters.is_empty() || filters.len() > MAX_FILTERS {
        return Err(Violation::new(
            "$.events",
            format!("'events' must list 1 to {MAX_FILTERS} event types (or '*' for every event)"),
        ));
    }
    for (i, f) in filters.iter().enumerate() {
        let name = f.strip_suffix(".*").unwrap_or(f);
        let valid = f == "*"
            || (name.len() <= 255
                && name.split('.').all(|segment| {
                    segment
                        .bytes()
                        .next()
                        .is_some_and(|b| b.is_ascii_lowercase())
                        && segment
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                }));
        if !valid {
            return Err(Violation::new(
                format!("$.events[{i}]"),
                format!(
                    "{:?} is not an event filter: an event type (job.completed), a prefix (job.*) or *",
                    f.chars().take(100).collect::<String>()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a subscription's `url`: absolute `http` or `https`, with a host, no credentials, at
/// most [`MAX_URL_BYTES`]. Where it points is checked at delivery ([`is_public`]).
pub fn check_url(url: &str) -> Result<(), Violation> {
    let invalid = |why: &str| Err(Violation::new("$.url", format!("'url' {why}")));
    if url.len() > MAX_URL_BYTES {
        return invalid(&format!("may hold up to {MAX_URL_BYTES} bytes"));
    }
    let Ok(parsed) = url::Url::parse(url) else {
        return invalid("must be an absolute http or https URL");
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return invalid("must be an http or https URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return invalid("must name a host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return invalid("must not carry credentials (sign with the secret instead)");
    }
    Ok(())
}

/// Checks a subscription's `secret`: 1 to [`MAX_SECRET_BYTES`] bytes.
pub fn check_secret(secret: &str) -> Result<(), Violation> {
    if secret.is_empty() || secret.len() > MAX_SECRET_BYTES {
        return Err(Violation::new(
            "$.secret",
            format!("'secret' must hold 1 to {MAX_SECRET_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `"<timestamp>.<body>"`).
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `ip` is a public unicast address a delivery may reach without the operator's leave.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT, 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || first == 0x2001 && ip.segments()[1] == 0x0db8 // documentation
        || first == 0x0064 && ip.segments()[1] == 0xff9b) // NAT64 (maps IPv4, maybe private)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_exact_types_prefixes_and_everything() {
        let f = Filters::of(&["job.completed".into(), "queue.*".into()]);
        assert!(f.matches("job.completed"));
        assert!(!f.matches("job.completed_late") && !f.matches("job.failed"));
        assert!(f.matches("queue.paused"));
        assert!(!f.matches("queues.paused"));
        assert!(Filters::of(&["*".into()]).matches("anything.at_all"));
        assert!(check_filters(&["job.completed".into(), "job.*".into(), "*".into()]).is_ok());
        for bad in [
            "",
            "Job.completed",
            "job..x",
            "job.*.x",
            "job*",
            ".job",
            "j b",
        ] {
            assert!(check_filters(&[bad.to_owned()]).is_err(), "{bad:?}");
        }
        assert!(check_filters(&[]).is_err());
        assert!(check_filters(&vec!["job.a".to_owned(); 101]).is_err());
    }

    #[test]
    fn urls_are_absolute_http_without_credentials() {
        assert!(check_url("https://example.com/hook?x=1").is_ok());
        assert!(
            check_url("http://10.0.0.1:8080/").is_ok(),
            "refused at delivery, not here"
        );
        for bad in [
            "ftp://example.com/",
            "example.com/hook",
            "https://u:p@example.com/",
            "http://",
            "file:///etc/passwd",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert!(check_url(&format!("https://example.com/{}", "a".repeat(3000))).is_err());
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: Python hmac.new(b"s3cret", b"1700000000.{\"a\":1}", sha256).
        assert_eq!(
            signature("s3cret", 1_700_000_000, br#"{"a":1}"#),
            "sha256=1698a50bc74d1ff1db85c4e0a5297c2ad9fdba245d5737cdb789e4cc6e098940"
        );
    }

    #[test]
    fn only_public_unicast_addresses_are_reached() {
        let public = [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ];
        for ip in public {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        let private = [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "192.0.0.8",
            "198.18.0.1",
        ];
        for ip in private {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn retries_back_off_then_give_up() {
        assert_eq!(retry_delay(1), Some(Duration::ZERO));
        assert_eq!(retry_delay(2), Some(Duration::from_secs(30)));
        assert_eq!(retry_delay(8), Some(Duration::from_secs(86_400)));
        assert_eq!(retry_delay(9), None);
        assert_eq!(retry_delay(0), None);
    }
}
