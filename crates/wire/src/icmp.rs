//! ICMP destination-unreachable messages (RFC 792) carrying the header of
//! the TCP segment that could not be delivered (RFC 1122 §3.2.2.1: the IP
//! header plus at least eight octets of it).

use crate::{Error, SeqNum};
use std::net::Ipv4Addr;

pub const TYPE_DEST_UNREACHABLE: u8 = 3;
/// Code 1 of destination unreachable: host unreachable.
pub const CODE_HOST_UNREACHABLE: u8 = 1;

/// The addressing of the TCP segment an ICMP error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    pub code: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNum,
}

/// Parse an ICMP message (the IP payload). Returns `Ok(None)` for ICMP
/// types the router does not act on.
pub fn parse_unreachable(icmp: &[u8]) -> Result<Option<Unreachable>, Error> {
    if icmp.len() < 8 {
        return Err(Error::Truncated);
    }
    if icmp[0] != TYPE_DEST_UNREACHABLE {
        return Ok(None);
    }
    let inner = &icmp[8..];
    if inner.len() < 20 {
        return Err(Error::Truncated);
    }
    if inner[0] >> 4 != 4 {
        return Err(Error::NotIpv4);
    }
    let ihl = ((inner[0] & 0x0f) as usize) * 4;
    if ihl < 20 {
        return Err(Error::Malformed);
    }
    if inner[9] != crate::ipv4::PROTO_TCP {
        return Ok(None);
    }
    let t = inner.get(ihl..ihl + 8).ok_or(Error::Truncated)?;
    Ok(Some(Unreachable {
        code: icmp[1],
        src: Ipv4Addr::new(inner[12], inner[13], inner[14], inner[15]),
        dst: Ipv4Addr::new(inner[16], inner[17], inner[18], inner[19]),
        src_port: u16::from_be_bytes([t[0], t[1]]),
        dst_port: u16::from_be_bytes([t[2], t[3]]),
        seq: SeqNum(u32::from_be_bytes([t[4], t[5], t[6], t[7]])),
    }))
}

/// An ICMP destination-unreachable message from `src` to `dst` (a whole
/// IPv4 packet) about the TCP segment `quoted` describes: its IPv4 header
/// and the first eight octets of its TCP header (ports and sequence number,
/// what RFC 5927 and Linux's `tcp_v4_err` check). The quoted segment is a
/// bare 20-byte header with the ACK flag and no payload.
pub fn emit_unreachable(src: Ipv4Addr, dst: Ipv4Addr, code: u8, quoted: &Unreachable) -> Vec<u8> {
    // Outer IPv4 header, ICMP header, quoted IPv4 header, quoted 8 octets.
    const TOTAL: u16 = 20 + 8 + 20 + 8;
    let mut b = vec![0u8; usize::from(TOTAL)];
    crate::ipv4::emit_header(&mut b[..20], src, dst, crate::ipv4::PROTO_ICMP, TOTAL, 64);
    b[20] = TYPE_DEST_UNREACHABLE;
    b[21] = code;
    let inner = &mut b[28..];
    crate::ipv4::emit_header(
        &mut inner[..20],
        quoted.src,
        quoted.dst,
        crate::ipv4::PROTO_TCP,
        40,
        64,
    );
    inner[20..22].copy_from_slice(&quoted.src_port.to_be_bytes());
    inner[22..24].copy_from_slice(&quoted.dst_port.to_be_bytes());
    inner[24..28].copy_from_slice(&quoted.seq.0.to_be_bytes());
    let c = crate::checksum::complete(&b[20..], 0);
    b[22..24].copy_from_slice(&c.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_embedded_tcp() {
        let mut m = vec![3u8, 1, 0, 0, 0, 0, 0, 0];
        let mut ip = [0u8; 20];
        crate::ipv4::emit_header(
            &mut ip,
            Ipv4Addr::new(198, 18, 1, 2),
            Ipv4Addr::new(198, 18, 11, 2),
            6,
            60,
            64,
        );
        m.extend_from_slice(&ip);
        m.extend_from_slice(&[0x9c, 0x40, 0x18, 0xeb, 0, 0, 0, 42]);
        let u = parse_unreachable(&m).unwrap().unwrap();
        assert_eq!(u.code, 1);
        assert_eq!(u.dst, Ipv4Addr::new(198, 18, 11, 2));
        assert_eq!((u.src_port, u.dst_port, u.seq), (40000, 6379, SeqNum(42)));
        assert_eq!(parse_unreachable(&m[..30]).unwrap_err(), Error::Truncated);
        m[0] = 8;
        assert_eq!(parse_unreachable(&m).unwrap(), None);
    }

    #[test]
    fn emits_what_it_parses() {
        let q = Unreachable {
            code: CODE_HOST_UNREACHABLE,
            src: Ipv4Addr::new(198, 18, 1, 2),
            dst: Ipv4Addr::new(198, 19, 0, 1),
            src_port: 40000,
            dst_port: 6379,
            seq: SeqNum(0xdead_beef),
        };
        let b = emit_unreachable(
            Ipv4Addr::new(198, 19, 0, 1),
            q.src,
            CODE_HOST_UNREACHABLE,
            &q,
        );
        let ip = crate::ipv4::Packet::new_checked(&b[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.protocol(), crate::ipv4::PROTO_ICMP);
        assert_eq!((ip.src(), ip.dst()), (Ipv4Addr::new(198, 19, 0, 1), q.src));
        // The ICMP checksum covers the message: summed with it, all ones.
        assert_eq!(crate::checksum::complete(ip.payload(), 0), 0);
        assert_eq!(parse_unreachable(ip.payload()).unwrap(), Some(q));
    }
}
