//! Conversions whose truncation is the rule: TCP sequence numbers and
//! timestamps are 32-bit counters that wrap (RFC 9293 §3.4, RFC 7323 §5.4,
//! RFC 6528 §3), so a length, an offset or a clock reading enters them
//! modulo 2^32. Every such cast of the crate goes through here.

/// `n` modulo 2^32: a clock reading or hash as a 32-bit counter that wraps
/// (the TCP timestamp clock, RFC 7323 §5.4; the ISN clock and hash, RFC
/// 6528 §3).
#[allow(clippy::cast_possible_truncation)] // Modulo 2^32 is the intent.
pub(crate) fn mod32(n: u64) -> u32 {
    n as u32
}

/// A length or offset as a distance in sequence space (RFC 9293 §3.4:
/// sequence arithmetic is modulo 2^32). The buffers measured are far below
/// 4 GiB (a packet, or the vote's bounded buffers).
#[allow(clippy::cast_possible_truncation)] // Modulo 2^32 is the intent.
pub(crate) fn len32(n: usize) -> u32 {
    n as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_modulo_2_32() {
        assert_eq!(mod32(5), 5);
        assert_eq!(mod32((1 << 32) + 7), 7);
        assert_eq!(mod32(u64::MAX), u32::MAX);
        assert_eq!(len32(65535), 65535);
        assert_eq!(len32(usize::MAX), u32::MAX);
    }
}
