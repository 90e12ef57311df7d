//! Challenge ACKs (RFC 5961 §7): how many may go, per connection and
//! router-wide.

use super::Ctx;
use crate::time::Instant;

/// At most one challenge ACK per this long per connection and direction
/// (RFC 5961 §7: "an implementation SHOULD include an ACK throttling
/// mechanism").
pub const CHALLENGE_GAP: core::time::Duration = core::time::Duration::from_millis(50);
/// At most this many challenge ACKs per second for the whole router (RFC
/// 5961 §7 suggests a system-wide limit; Linux's default is 1000/s).
pub const CHALLENGE_PER_SEC: u32 = 1000;

/// The router-wide challenge-ACK budget: a count per one-second window.
#[derive(Debug, Default)]
pub struct ChallengeBudget {
    window: Instant,
    sent: u32,
}

impl ChallengeBudget {
    /// Take one challenge ACK from the budget of the second `now` is in.
    fn take(&mut self, now: Instant) -> bool {
        if now.saturating_sub(self.window) >= core::time::Duration::from_secs(1) {
            self.window = now;
            self.sent = 0;
        }
        if self.sent >= CHALLENGE_PER_SEC {
            return false;
        }
        self.sent += 1;
        true
    }
}

/// Whether a challenge ACK may go now, given when the last one of this
/// connection and direction went (`last`, updated): RFC 5961 §7, per
/// connection and router-wide.
pub(super) fn may_challenge(ctx: &mut Ctx, last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|t| ctx.now.saturating_sub(t) < CHALLENGE_GAP)
        || !ctx.challenges.take(ctx.now)
    {
        ctx.counters.challenge_acks_limited += 1;
        return false;
    }
    *last = Some(ctx.now);
    ctx.counters.challenge_acks += 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn budget_is_per_second() {
        let mut b = ChallengeBudget::default();
        let t0 = Instant::ZERO + Duration::from_secs(5);
        for _ in 0..CHALLENGE_PER_SEC {
            assert!(b.take(t0));
        }
        assert!(!b.take(t0));
        assert!(!b.take(t0 + Duration::from_millis(999)));
        // The next second has a budget of its own.
        assert!(b.take(t0 + Duration::from_secs(1)));
    }
}
