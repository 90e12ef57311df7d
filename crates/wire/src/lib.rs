//! Bytes on the wire: IPv4 and TCP packet views with in-place setters, TCP
//! options, ICMP errors, RFC 1071/1624 checksums and the virtio-net header
//! that carries GSO and partial-checksum metadata through a TUN device.
//!
//! Architecture invariant: this crate knows nothing about connections or
//! replicas. Every view over untrusted bytes is built with `new_checked`,
//! which validates lengths once so that the getters never panic.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod icmp;
pub mod ipv4;
pub mod seq;
pub mod tcp;
pub mod vnet;

pub use checksum::IpPair;
pub use seq::{len32, mod32, SeqDelta, SeqNum};

/// A byte range inside a header, named like smoltcp's `field` modules.
pub type Field = core::ops::Range<usize>;

/// Why a buffer could not be viewed as a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("packet shorter than its header")]
    Truncated,
    #[error("header field holds an impossible value")]
    Malformed,
    #[error("not IPv4")]
    NotIpv4,
    #[error("IP fragment (not handled)")]
    Fragment,
    #[error("bad checksum")]
    Checksum,
}
