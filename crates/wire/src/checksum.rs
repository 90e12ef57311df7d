//! Internet checksum: full computation (RFC 1071) and incremental update
//! (RFC 1624).
//!
//! Two forms of the TCP checksum field reach the router:
//! * a *complete* checksum, the one's complement of the sum over pseudo
//!   header, header and payload (RFC 9293 §3.1);
//! * a *partial* checksum (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, the kernel's
//!   CHECKSUM_PARTIAL): the field holds only the folded, *uncomplemented*
//!   sum of the pseudo header, and whoever transmits finishes the sum over
//!   the segment. Rewriting an address must update it; rewriting a sequence
//!   number, ack, window or option must not, because those bytes are summed
//!   later.

use std::net::{Ipv4Addr, Ipv6Addr};

/// One's complement sum of `data` as big-endian 16-bit words, added to
/// `acc` without folding (RFC 1071 §4.1). An odd trailing byte is padded
/// with zero.
pub fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Four 16-bit words at once; a u64 accumulator cannot overflow for
        // any buffer shorter than 2^48 bytes.
        acc += u16::from_be_bytes([c[0], c[1]]) as u64
            + u16::from_be_bytes([c[2], c[3]]) as u64
            + u16::from_be_bytes([c[4], c[5]]) as u64
            + u16::from_be_bytes([c[6], c[7]]) as u64;
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u16::from_be_bytes([w[0], w[1]]) as u64;
    }
    if let [b] = words.remainder() {
        acc += (*b as u64) << 8;
    }
    acc
}

/// Fold a wide one's complement sum into 16 bits (end-around carry).
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    // The loop leaves at most 16 significant bits.
    u16::try_from(acc).unwrap_or(u16::MAX)
}

/// The two ends of a packet as the pseudo header sees them: the seam that
/// keeps the TCP checksum independent of the IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpPair {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl From<(Ipv4Addr, Ipv4Addr)> for IpPair {
    fn from((src, dst): (Ipv4Addr, Ipv4Addr)) -> IpPair {
        IpPair::V4 { src, dst }
    }
}

impl From<(Ipv6Addr, Ipv6Addr)> for IpPair {
    fn from((src, dst): (Ipv6Addr, Ipv6Addr)) -> IpPair {
        IpPair::V6 { src, dst }
    }
}

/// Sum of the pseudo header of either IP version over an upper-layer
/// packet of `len` octets carrying protocol `proto` (unfolded, like
/// [`sum`]).
///
/// IPv4 (RFC 9293 §3.1): source, destination, zero, protocol, TCP length.
/// IPv6 (RFC 8200 §8.1): source, destination, 32-bit upper-layer length,
/// three zero octets, next header. Both are sums of 16-bit words, so the
/// zero octets add nothing and only the words' order differs.
pub fn pseudo_header_of(ends: IpPair, proto: u8, len: u32) -> u64 {
    let lens = u64::from(len >> 16) + u64::from(len & 0xffff) + u64::from(proto);
    match ends {
        IpPair::V4 { src, dst } => sum(&dst.octets(), sum(&src.octets(), lens)),
        IpPair::V6 { src, dst } => sum(&dst.octets(), sum(&src.octets(), lens)),
    }
}

/// Sum of the IPv4 pseudo header (RFC 9293 §3.1): source, destination,
/// zero, protocol, TCP length.
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u32) -> u64 {
    pseudo_header_of(IpPair::V4 { src, dst }, proto, len)
}

/// The complete checksum over `data` starting from sum `acc`.
pub fn complete(data: &[u8], acc: u64) -> u16 {
    !fold(sum(data, acc))
}

/// RFC 1624 eqn. 3: the new complete checksum `HC' = ~(~HC + ~m + m')` after
/// a 16-bit word changed from `old` to `new`.
#[inline]
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    !fold(!check as u64 + !old as u64 + new as u64)
}

/// RFC 1624 for a 32-bit field (two words at once).
#[inline]
pub fn update32(check: u16, old: u32, new: u32) -> u16 {
    !fold(
        !check as u64
            + (!(old >> 16) & 0xffff) as u64
            + (!old & 0xffff) as u64
            + (new >> 16) as u64
            + (new & 0xffff) as u64,
    )
}

/// The same updates for a partial (uncomplemented) pseudo-header sum: the
/// field holds `S`, not `~S`.
#[inline]
pub fn update16_partial(sum: u16, old: u16, new: u16) -> u16 {
    !update16(!sum, old, new)
}

/// 32-bit variant of [`update16_partial`].
#[inline]
pub fn update32_partial(sum: u16, old: u32, new: u32) -> u16 {
    !update32(!sum, old, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // RFC 1071 §3 example: the sum of these words is ddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    proptest! {
        // RFC 1624: the incremental update equals a full recomputation.
        #[test]
        fn incremental_equals_full(mut data in proptest::collection::vec(any::<u8>(), 8..200),
                                   at in any::<prop::sample::Index>(), new in any::<u32>()) {
            let i = at.index(data.len() / 4) * 4;
            let before = complete(&data, 0);
            let old = u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
            data[i..i + 4].copy_from_slice(&new.to_be_bytes());
            let after = complete(&data, 0);
            let inc = update32(before, old, new);
            // +0 and -0 are the same number in one's complement.
            prop_assert!(inc == after || (inc ^ after) == 0xffff && (inc == 0 || after == 0),
                "inc {inc:#x} full {after:#x}");
            let w_old = (old >> 16) as u16;
            let w_new = (new >> 16) as u16;
            let inc16 = update16(before, w_old, w_new);
            data[i + 2..i + 4].copy_from_slice(&((old & 0xffff) as u16).to_be_bytes());
            let full16 = complete(&data, 0);
            prop_assert!(inc16 == full16 || (inc16 ^ full16) == 0xffff && (inc16 == 0 || full16 == 0));
        }

        // A partial sum updated for an address change equals the partial sum
        // computed from scratch for the new addresses.
        #[test]
        fn partial_update_matches_recompute(a in any::<u32>(), b in any::<u32>(), c in any::<u32>(), len in 20u32..65535) {
            let s0 = fold(pseudo_header(Ipv4Addr::from(a), Ipv4Addr::from(b), 6, len));
            let s1 = fold(pseudo_header(Ipv4Addr::from(c), Ipv4Addr::from(b), 6, len));
            let inc = update32_partial(s0, a, c);
            prop_assert!(inc == s1 || (inc ^ s1) == 0xffff && (inc == 0xffff || s1 == 0xffff));
        }
    }
}
