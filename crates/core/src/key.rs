//! The connection's four-tuple.

use std::net::Ipv4Addr;

/// The four-tuple as the client sees it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ConnKey {
    pub client: Ipv4Addr,
    pub cport: u16,
    pub vip: Ipv4Addr,
    pub vport: u16,
}

impl std::fmt::Display for ConnKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}->{}:{}",
            self.client, self.cport, self.vip, self.vport
        )
    }
}
