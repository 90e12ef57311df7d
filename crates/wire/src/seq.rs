//! TCP sequence-number arithmetic modulo 2^32 (RFC 9293 §3.4).
//!
//! `SeqNum` deliberately does not implement `PartialOrd`: comparison modulo
//! 2^32 is not transitive, so every comparison names its direction.

use core::fmt;

/// A 32-bit TCP sequence (or acknowledgment) number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNum(pub u32);

/// The distance from one sequence space to another (for example from a
/// replica's ISN to the client-visible ISN). Applying it is a wrapping add.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct SeqDelta(pub u32);

// `add`/`sub` take a length, not another `SeqNum`: not the `ops` traits.
#[allow(clippy::should_implement_trait)]
impl SeqNum {
    /// `self + n` modulo 2^32.
    #[inline]
    pub fn add(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }
    /// `self - n` modulo 2^32.
    #[inline]
    pub fn sub(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(n))
    }
    /// Signed distance `self - other`, valid while the two are less than
    /// 2^31 apart.
    #[inline]
    pub fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// `self` comes strictly after `other`.
    #[inline]
    pub fn is_after(self, other: SeqNum) -> bool {
        self.diff(other) > 0
    }
    /// `self` comes strictly before `other`.
    #[inline]
    pub fn is_before(self, other: SeqNum) -> bool {
        self.diff(other) < 0
    }
    /// The later of the two.
    #[inline]
    pub fn max(self, other: SeqNum) -> SeqNum {
        if self.is_after(other) {
            self
        } else {
            other
        }
    }
    /// The earlier of the two.
    #[inline]
    pub fn min(self, other: SeqNum) -> SeqNum {
        if self.is_before(other) {
            self
        } else {
            other
        }
    }
    /// Translate into another sequence space.
    #[inline]
    pub fn shift(self, d: SeqDelta) -> SeqNum {
        SeqNum(self.0.wrapping_add(d.0))
    }
    /// Translate back out of another sequence space.
    #[inline]
    pub fn unshift(self, d: SeqDelta) -> SeqNum {
        SeqNum(self.0.wrapping_sub(d.0))
    }
}

impl SeqDelta {
    /// The delta that maps `from` onto `to`.
    pub fn between(from: SeqNum, to: SeqNum) -> SeqDelta {
        SeqDelta(to.0.wrapping_sub(from.0))
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

// Conversions whose truncation is the rule: TCP sequence numbers and
// timestamps are 32-bit counters that wrap (RFC 9293 §3.4, RFC 7323 §5.4,
// RFC 6528 §3), so a length, an offset or a clock reading enters them modulo
// 2^32. Every such cast of the workspace goes through these two.

/// `n` modulo 2^32: a clock reading or hash as a 32-bit counter that wraps
/// (the TCP timestamp clock, RFC 7323 §5.4; the ISN clock and hash, RFC
/// 6528 §3).
#[allow(clippy::cast_possible_truncation)] // Modulo 2^32 is the intent.
pub fn mod32(n: u64) -> u32 {
    n as u32
}

/// A length or offset as a distance in sequence space (RFC 9293 §3.4:
/// sequence arithmetic is modulo 2^32). The buffers measured are far below
/// 4 GiB (a packet, or the vote's bounded buffers).
#[allow(clippy::cast_possible_truncation)] // Modulo 2^32 is the intent.
pub fn len32(n: usize) -> u32 {
    n as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_32() {
        let a = SeqNum(u32::MAX - 10);
        let b = a.add(20);
        assert_eq!(b, SeqNum(9));
        assert!(b.is_after(a));
        assert!(a.is_before(b));
        assert_eq!(b.diff(a), 20);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }

    proptest! {
        #[test]
        fn shift_round_trips(s in any::<u32>(), from in any::<u32>(), to in any::<u32>()) {
            let d = SeqDelta::between(SeqNum(from), SeqNum(to));
            prop_assert_eq!(SeqNum(from).shift(d), SeqNum(to));
            prop_assert_eq!(SeqNum(s).shift(d).unshift(d), SeqNum(s));
        }

        #[test]
        fn order_is_antisymmetric(a in any::<u32>(), n in 1u32..(1 << 31)) {
            let x = SeqNum(a);
            let y = x.add(n);
            prop_assert!(y.is_after(x));
            prop_assert!(!x.is_after(y));
            prop_assert_eq!(y.diff(x) as i64, n as i64);
        }
    }

    #[test]
    fn wraps_modulo_2_32() {
        assert_eq!(mod32(5), 5);
        assert_eq!(mod32((1 << 32) + 7), 7);
        assert_eq!(mod32(u64::MAX), u32::MAX);
        assert_eq!(len32(65535), 65535);
        assert_eq!(len32(usize::MAX), u32::MAX);
    }
}
