//! Time as data: the core never reads a clock.

use core::time::Duration;

/// A point in time in microseconds since an arbitrary origin chosen by the
/// driver (the binaries use a monotonic clock, the simulation its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub fn from_micros(us: u64) -> Instant {
        Instant(us)
    }
    pub fn as_micros(self) -> u64 {
        self.0
    }
    pub fn as_millis(self) -> u64 {
        self.0 / 1000
    }
    pub fn saturating_sub(self, other: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(other.0))
    }
}

impl core::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        )
    }
}
