//! IPv4 header view (RFC 791) with in-place setters that keep the header
//! checksum valid.

use crate::{checksum, Error, Field};
use std::net::Ipv4Addr;

mod field {
    use crate::Field;
    pub const VER_IHL: usize = 0;
    pub const LENGTH: Field = 2..4;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const MIN_HEADER_LEN: usize = 20;

/// A view of an IPv4 packet at the start of `buffer`.
#[derive(Debug)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn get16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without checks; only for buffers this process built itself.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wrap an untrusted buffer: version 4, a sane header length, a total
    /// length that fits the buffer, and no fragmentation.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::NotIpv4);
        }
        let ihl = ((b[field::VER_IHL] & 0x0f) as usize) * 4;
        if ihl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = get16(b, field::LENGTH) as usize;
        if total < ihl {
            return Err(Error::Malformed);
        }
        if total > b.len() || ihl > b.len() {
            return Err(Error::Truncated);
        }
        // More-fragments flag or a non-zero offset: a fragment. TCP over
        // the paths we serve uses PMTU discovery, so fragments are dropped.
        if get16(b, field::FLG_OFF) & 0x3fff != 0 {
            return Err(Error::Fragment);
        }
        Ok(Packet { buffer })
    }

    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    pub fn total_len(&self) -> usize {
        get16(self.buffer.as_ref(), field::LENGTH) as usize
    }
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    pub fn src(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    pub fn dst(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The header checksum verifies (RFC 791).
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        checksum::fold(checksum::sum(&b[..self.header_len()], 0)) == 0xffff
    }
    /// Bytes after the IP header, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn put_addr(&mut self, f: Field, a: Ipv4Addr) {
        let old = u32::from_be_bytes(self.buffer.as_ref()[f.clone()].try_into().unwrap_or([0; 4]));
        let new = u32::from(a);
        self.buffer.as_mut()[f].copy_from_slice(&a.octets());
        let c = checksum::update32(self.checksum(), old, new);
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
    /// Set the source address, updating the header checksum (RFC 1624).
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.put_addr(field::SRC, a)
    }
    /// Set the destination address, updating the header checksum.
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.put_addr(field::DST, a)
    }
    /// Recompute the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum::complete(&b[..hl], 0);
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[h..t]
    }
}

/// Write a 20-byte IPv4 header (no options, DF set) into `buf[..20]`.
pub fn emit_header(
    buf: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    total_len: u16,
    ttl: u8,
) {
    buf[0] = 0x45;
    buf[1] = 0;
    buf[2..4].copy_from_slice(&total_len.to_be_bytes());
    buf[4..6].copy_from_slice(&[0, 0]);
    buf[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    buf[8] = ttl;
    buf[9] = proto;
    buf[12..16].copy_from_slice(&src.octets());
    buf[16..20].copy_from_slice(&dst.octets());
    let mut p = Packet::new_unchecked(&mut buf[..20]);
    p.fill_checksum();
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0xc6, 0x12, 0x01,
        0x02, 0xc6, 0x13, 0x00, 0x01, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    fn fixed() -> Vec<u8> {
        let mut v = PACKET.to_vec();
        Packet::new_unchecked(&mut v[..]).fill_checksum();
        v
    }

    #[test]
    fn deconstruct() {
        let v = fixed();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.protocol(), PROTO_TCP);
        assert_eq!(p.src(), Ipv4Addr::new(198, 18, 1, 2));
        assert_eq!(p.dst(), Ipv4Addr::new(198, 19, 0, 1));
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(p.verify_checksum());
    }

    #[test]
    fn set_addr_keeps_checksum_valid() {
        let mut v = fixed();
        let mut p = Packet::new_checked(&mut v[..]).unwrap();
        p.set_dst(Ipv4Addr::new(10, 1, 2, 3));
        p.set_src(Ipv4Addr::new(255, 0, 255, 0));
        assert!(p.verify_checksum());
        let incremental = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), incremental);
    }

    #[test]
    fn rejects_bad_input() {
        let v = fixed();
        assert_eq!(Packet::new_checked(&v[..10]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&v[..23]).unwrap_err(), Error::Truncated);
        let mut w = v.clone();
        w[0] = 0x65;
        assert_eq!(Packet::new_checked(&w[..]).unwrap_err(), Error::NotIpv4);
        let mut w = v.clone();
        w[0] = 0x44;
        assert_eq!(Packet::new_checked(&w[..]).unwrap_err(), Error::Malformed);
        let mut w = v.clone();
        w[6] = 0x20; // more fragments
        assert_eq!(Packet::new_checked(&w[..]).unwrap_err(), Error::Fragment);
    }
}
