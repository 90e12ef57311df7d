//! The virtio-net header (`struct virtio_net_hdr`, 10 bytes, native byte
//! order) that a TUN device opened with `IFF_VNET_HDR` puts before every
//! packet. It carries GSO super-packet and checksum-offload metadata.

use crate::Error;

pub const LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum is partial; finish it from
/// `csum_start`, store at `csum_start + csum_offset`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the kernel already validated the checksum.
pub const F_DATA_VALID: u8 = 2;

pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_ECN: u8 = 0x80;

/// Offload metadata of one packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    /// A plain packet: no GSO, checksum complete in the packet.
    pub const NONE: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    pub fn parse(b: &[u8]) -> Result<VnetHdr, Error> {
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }

    /// The TCP checksum field holds a partial (pseudo-header) sum.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }

    /// A GSO super-packet that the kernel will cut into segments.
    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let mut b = [0u8; LEN];
        h.emit(&mut b);
        assert_eq!(VnetHdr::parse(&b).unwrap(), h);
        assert!(h.needs_csum() && h.is_gso());
        assert!(!VnetHdr::NONE.is_gso());
        assert_eq!(VnetHdr::parse(&b[..9]).unwrap_err(), Error::Truncated);
    }
}
