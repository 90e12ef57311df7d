//! The unit of I/O between the core and its driver.

use ftnet_wire::vnet::VnetHdr;

/// One IPv4 packet with its offload metadata, as read from or written to
/// the TUN device. `data` starts at the IPv4 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub vnet: VnetHdr,
    pub data: Vec<u8>,
}

impl Packet {
    /// A plain packet with a complete checksum and no GSO.
    pub fn plain(data: Vec<u8>) -> Packet {
        Packet {
            vnet: VnetHdr::NONE,
            data,
        }
    }
}
