//! TCP segment view (RFC 9293 §3.1) with option access (RFC 7323, RFC 2018)
//! and setters that keep the checksum right in both of its forms (see
//! [`crate::checksum`]).

use crate::{checksum, Error, Field, SeqNum};
use std::net::Ipv4Addr;

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ_NUM: Field = 4..8;
    pub const ACK_NUM: Field = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const OPTIONS_START: usize = 20;
}

pub const HEADER_LEN: usize = 20;

pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// TCP option kinds the router reads or rewrites.
pub mod opt {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    /// RFC 9293 §3.2: Maximum Segment Size, length 4.
    pub const MSS: u8 = 2;
    /// RFC 7323 §2: Window Scale, length 3.
    pub const WSCALE: u8 = 3;
    /// RFC 2018: SACK permitted, length 2.
    pub const SACK_PERM: u8 = 4;
    /// RFC 2018: SACK blocks.
    pub const SACK: u8 = 5;
    /// RFC 7323 §3: Timestamps, length 10.
    pub const TIMESTAMP: u8 = 8;
}

/// How the checksum field of a segment is to be maintained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumMode {
    /// The field holds the complete checksum: every change updates it.
    Complete,
    /// The field holds the pseudo-header sum only (checksum offload): only
    /// address and length changes update it.
    Partial,
}

/// Offsets of the options the router cares about, relative to the TCP
/// header start. Found once by [`Segment::new_checked`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionOffsets {
    pub mss: Option<u16>,
    pub wscale: Option<u16>,
    pub sack_perm: Option<u16>,
    pub sack: Option<(u16, u8)>,
    pub timestamp: Option<u16>,
}

/// A TCP segment occupying the whole of `buffer` (header and payload).
#[derive(Debug)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
    opts: OptionOffsets,
}

fn get16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}
fn get32(b: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

/// Walk the option list, validating every length (RFC 9293 §3.2: an option
/// other than EOL and NOP carries a length octet that counts kind and
/// length).
fn parse_options(opts: &[u8]) -> Result<OptionOffsets, Error> {
    let mut out = OptionOffsets::default();
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        match kind {
            opt::EOL => break,
            opt::NOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = *opts.get(i + 1).ok_or(Error::Malformed)? as usize;
        if len < 2 || i + len > opts.len() {
            return Err(Error::Malformed);
        }
        let at = (field::OPTIONS_START + i) as u16;
        let want = match kind {
            opt::MSS => {
                out.mss = Some(at);
                Some(4)
            }
            opt::WSCALE => {
                out.wscale = Some(at);
                Some(3)
            }
            opt::SACK_PERM => {
                out.sack_perm = Some(at);
                Some(2)
            }
            opt::TIMESTAMP => {
                out.timestamp = Some(at);
                Some(10)
            }
            opt::SACK => {
                if !(len - 2).is_multiple_of(8) {
                    return Err(Error::Malformed);
                }
                out.sack = Some((at, len as u8));
                None
            }
            _ => None,
        };
        if let Some(w) = want {
            if len != w {
                return Err(Error::Malformed);
            }
        }
        i += len;
    }
    Ok(out)
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wrap an untrusted buffer: a data offset within bounds and
    /// well-formed options.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = ((b[field::DATA_OFF] >> 4) as usize) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if hl > b.len() {
            return Err(Error::Truncated);
        }
        let opts = parse_options(&b[field::OPTIONS_START..hl])?;
        Ok(Segment { buffer, opts })
    }

    pub fn options(&self) -> OptionOffsets {
        self.opts
    }
    pub fn src_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::DST_PORT)
    }
    pub fn seq(&self) -> SeqNum {
        SeqNum(get32(self.buffer.as_ref(), field::SEQ_NUM))
    }
    pub fn ack(&self) -> SeqNum {
        SeqNum(get32(self.buffer.as_ref(), field::ACK_NUM))
    }
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::DATA_OFF] >> 4) as usize) * 4
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }
    pub fn ack_flag(&self) -> bool {
        self.flags() & flags::ACK != 0
    }
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }
    pub fn window(&self) -> u16 {
        get16(self.buffer.as_ref(), field::WIN_SIZE)
    }
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
    pub fn payload_len(&self) -> usize {
        self.buffer.as_ref().len() - self.header_len()
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Sequence space the segment occupies: payload plus one for SYN and
    /// one for FIN (RFC 9293 §3.4).
    pub fn seq_len(&self) -> u32 {
        self.payload_len() as u32 + self.syn() as u32 + self.fin() as u32
    }
    pub fn mss(&self) -> Option<u16> {
        let at = self.opts.mss? as usize;
        Some(get16(self.buffer.as_ref(), at + 2..at + 4))
    }
    pub fn wscale(&self) -> Option<u8> {
        let at = self.opts.wscale? as usize;
        Some(self.buffer.as_ref()[at + 2])
    }
    pub fn sack_permitted(&self) -> bool {
        self.opts.sack_perm.is_some()
    }
    /// (TSval, TSecr) of the timestamps option (RFC 7323 §3.2).
    pub fn timestamps(&self) -> Option<(u32, u32)> {
        let at = self.opts.timestamp? as usize;
        let b = self.buffer.as_ref();
        Some((get32(b, at + 2..at + 6), get32(b, at + 6..at + 10)))
    }
    /// The complete checksum over pseudo header, header and payload
    /// verifies.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header(src, dst, crate::ipv4::PROTO_TCP, b.len() as u32);
        checksum::fold(checksum::sum(b, ph)) == 0xffff
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Segment<T> {
    fn put_check(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
    fn put32(&mut self, f: Field, v: u32, mode: CsumMode) {
        let old = get32(self.buffer.as_ref(), f.clone());
        if old == v {
            return;
        }
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
        if mode == CsumMode::Complete {
            let c = checksum::update32(self.checksum(), old, v);
            self.put_check(c);
        }
    }
    /// Replace `range` (relative to the header start) by `new` of the same
    /// length, keeping the checksum right. Works at any byte alignment.
    fn replace(&mut self, start: usize, new: &[u8], mode: CsumMode) {
        let end = start + new.len();
        if &self.buffer.as_ref()[start..end] == new {
            return;
        }
        if mode == CsumMode::Partial {
            self.buffer.as_mut()[start..end].copy_from_slice(new);
            return;
        }
        // Sum the word-aligned region around the change before and after.
        let a = start & !1;
        let z = ((end + 1) & !1).min(self.buffer.as_ref().len());
        let before = checksum::fold(checksum::sum(&self.buffer.as_ref()[a..z], 0));
        self.buffer.as_mut()[start..end].copy_from_slice(new);
        let after = checksum::fold(checksum::sum(&self.buffer.as_ref()[a..z], 0));
        let c = checksum::update16(self.checksum(), before, after);
        self.put_check(c);
    }

    pub fn set_seq(&mut self, v: SeqNum, mode: CsumMode) {
        self.put32(field::SEQ_NUM, v.0, mode)
    }
    pub fn set_ack(&mut self, v: SeqNum, mode: CsumMode) {
        self.put32(field::ACK_NUM, v.0, mode)
    }
    pub fn set_window(&mut self, v: u16, mode: CsumMode) {
        self.replace(field::WIN_SIZE.start, &v.to_be_bytes(), mode)
    }
    pub fn set_flags(&mut self, v: u8, mode: CsumMode) {
        self.replace(field::FLAGS, &[v], mode)
    }
    pub fn set_mss(&mut self, v: u16, mode: CsumMode) {
        if let Some(at) = self.opts.mss {
            self.replace(at as usize + 2, &v.to_be_bytes(), mode)
        }
    }
    pub fn set_wscale(&mut self, v: u8, mode: CsumMode) {
        if let Some(at) = self.opts.wscale {
            self.replace(at as usize + 2, &[v], mode)
        }
    }
    pub fn set_timestamps(&mut self, tsval: u32, tsecr: u32, mode: CsumMode) {
        if let Some(at) = self.opts.timestamp {
            let at = at as usize;
            self.put32(at + 2..at + 6, tsval, mode);
            self.put32(at + 6..at + 10, tsecr, mode);
        }
    }
    /// Overwrite the SACK-permitted option with NOPs: the option disappears
    /// without changing any length.
    pub fn strip_sack_permitted(&mut self, mode: CsumMode) {
        if let Some(at) = self.opts.sack_perm.take() {
            self.replace(at as usize, &[opt::NOP, opt::NOP], mode)
        }
    }
    /// Overwrite any SACK blocks with NOPs.
    pub fn strip_sack(&mut self, mode: CsumMode) {
        if let Some((at, len)) = self.opts.sack.take() {
            let nops = [opt::NOP; 40];
            self.replace(at as usize, &nops[..len as usize], mode)
        }
    }
    /// Overwrite the timestamps option with NOPs.
    pub fn strip_timestamps(&mut self, mode: CsumMode) {
        if let Some(at) = self.opts.timestamp.take() {
            self.replace(at as usize, &[opt::NOP; 10], mode)
        }
    }
    /// Apply a change of one pseudo-header address to the checksum (both
    /// forms hold the pseudo-header sum).
    pub fn update_pseudo_addr(&mut self, old: Ipv4Addr, new: Ipv4Addr, mode: CsumMode) {
        let (o, n) = (u32::from(old), u32::from(new));
        let c = match mode {
            CsumMode::Complete => checksum::update32(self.checksum(), o, n),
            CsumMode::Partial => checksum::update32_partial(self.checksum(), o, n),
        };
        self.put_check(c);
    }
    /// Recompute the complete checksum from scratch.
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.put_check(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header(src, dst, crate::ipv4::PROTO_TCP, b.len() as u32);
        let c = checksum::complete(b, ph);
        self.put_check(c);
    }
}

/// A TCP segment to build from scratch (control path: RSTs and ACKs the
/// router originates, and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNum,
    pub ack: SeqNum,
    pub flags: u8,
    pub window: u16,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamps: Option<(u32, u32)>,
}

impl Repr {
    /// A bare segment with the given ports, numbers and flags.
    pub fn new(
        src_port: u16,
        dst_port: u16,
        seq: SeqNum,
        ack: SeqNum,
        flags: u8,
        window: u16,
    ) -> Repr {
        Repr {
            src_port,
            dst_port,
            seq,
            ack,
            flags,
            window,
            mss: None,
            wscale: None,
            sack_permitted: false,
            timestamps: None,
        }
    }

    pub fn header_len(&self) -> usize {
        let mut n = HEADER_LEN;
        if self.mss.is_some() {
            n += 4;
        }
        if self.wscale.is_some() {
            n += 4; // NOP + 3
        }
        if self.sack_permitted {
            n += 4; // NOP NOP + 2
        }
        if self.timestamps.is_some() {
            n += 12; // NOP NOP + 10
        }
        n
    }

    /// Parse a checked segment's header.
    pub fn parse<T: AsRef<[u8]>>(s: &Segment<T>) -> Repr {
        Repr {
            src_port: s.src_port(),
            dst_port: s.dst_port(),
            seq: s.seq(),
            ack: s.ack(),
            flags: s.flags(),
            window: s.window(),
            mss: s.mss(),
            wscale: s.wscale(),
            sack_permitted: s.sack_permitted(),
            timestamps: s.timestamps(),
        }
    }

    /// Build a complete IPv4 packet carrying this segment and `payload`,
    /// with both checksums filled in.
    pub fn emit_ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let hl = self.header_len();
        let total = crate::ipv4::MIN_HEADER_LEN + hl + payload.len();
        let mut buf = vec![0u8; total];
        crate::ipv4::emit_header(&mut buf, src, dst, crate::ipv4::PROTO_TCP, total as u16, 64);
        let t = &mut buf[crate::ipv4::MIN_HEADER_LEN..];
        t[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        t[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        t[4..8].copy_from_slice(&self.seq.0.to_be_bytes());
        t[8..12].copy_from_slice(&self.ack.0.to_be_bytes());
        t[12] = ((hl / 4) as u8) << 4;
        t[13] = self.flags;
        t[14..16].copy_from_slice(&self.window.to_be_bytes());
        let mut i = HEADER_LEN;
        if let Some(m) = self.mss {
            t[i..i + 4].copy_from_slice(&[opt::MSS, 4, (m >> 8) as u8, m as u8]);
            i += 4;
        }
        if let Some(w) = self.wscale {
            t[i..i + 4].copy_from_slice(&[opt::NOP, opt::WSCALE, 3, w]);
            i += 4;
        }
        if self.sack_permitted {
            t[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::SACK_PERM, 2]);
            i += 4;
        }
        if let Some((v, e)) = self.timestamps {
            t[i..i + 4].copy_from_slice(&[opt::NOP, opt::NOP, opt::TIMESTAMP, 10]);
            t[i + 4..i + 8].copy_from_slice(&v.to_be_bytes());
            t[i + 8..i + 12].copy_from_slice(&e.to_be_bytes());
        }
        t[hl..].copy_from_slice(payload);
        let mut seg = Segment {
            buffer: t,
            opts: OptionOffsets::default(),
        };
        seg.fill_checksum(src, dst);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4;
    use proptest::prelude::*;

    fn a(x: u8) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, x)
    }

    fn syn() -> Vec<u8> {
        let mut r = Repr::new(
            40000,
            6379,
            SeqNum(0xfffffff0),
            SeqNum(0),
            flags::SYN,
            64240,
        );
        r.mss = Some(1460);
        r.wscale = Some(7);
        r.sack_permitted = true;
        r.timestamps = Some((1000, 0));
        r.emit_ipv4(a(1), a(2), b"")
    }

    #[test]
    fn construct_and_deconstruct() {
        let pkt = syn();
        let ip = ipv4::Packet::new_checked(&pkt[..]).unwrap();
        assert!(ip.verify_checksum());
        let s = Segment::new_checked(ip.payload()).unwrap();
        assert!(s.verify_checksum(a(1), a(2)));
        assert_eq!(s.src_port(), 40000);
        assert_eq!(s.dst_port(), 6379);
        assert_eq!(s.seq(), SeqNum(0xfffffff0));
        assert!(s.syn() && !s.ack_flag());
        assert_eq!(s.mss(), Some(1460));
        assert_eq!(s.wscale(), Some(7));
        assert!(s.sack_permitted());
        assert_eq!(s.timestamps(), Some((1000, 0)));
        assert_eq!(s.seq_len(), 1);
        assert_eq!(Repr::parse(&s).header_len(), s.header_len());
    }

    #[test]
    fn malformed_options_rejected() {
        let mut pkt = syn();
        // MSS option length 0: must not loop or panic.
        pkt[20 + 21] = 0;
        let ip = ipv4::Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            Segment::new_checked(ip.payload()).unwrap_err(),
            Error::Malformed
        );
        let mut pkt = syn();
        pkt[20 + 12] = 0xf0; // data offset 60 > segment
        let ip = ipv4::Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            Segment::new_checked(ip.payload()).unwrap_err(),
            Error::Truncated
        );
        let mut pkt = syn();
        pkt[20 + 12] = 0x10; // data offset 4 < 20
        let ip = ipv4::Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(
            Segment::new_checked(ip.payload()).unwrap_err(),
            Error::Malformed
        );
    }

    proptest! {
        // Any sequence of in-place rewrites leaves a checksum equal to a
        // full recomputation (RFC 1624 against RFC 1071).
        #[test]
        fn rewrites_keep_checksum(seq in any::<u32>(), ack in any::<u32>(), win in any::<u16>(),
                                  tv in any::<u32>(), te in any::<u32>(), mss in any::<u16>(), ws in 0u8..15,
                                  payload in proptest::collection::vec(any::<u8>(), 0..33), newdst in any::<u32>()) {
            let mut r = Repr::new(1, 2, SeqNum(7), SeqNum(9), flags::ACK | flags::SYN, 100);
            r.mss = Some(1400); r.wscale = Some(3); r.sack_permitted = true; r.timestamps = Some((5, 6));
            let mut pkt = r.emit_ipv4(a(1), a(2), &payload);
            let mut ip = ipv4::Packet::new_checked(&mut pkt[..]).unwrap();
            let nd = Ipv4Addr::from(newdst);
            ip.set_dst(nd);
            prop_assert!(ip.verify_checksum());
            let mut s = Segment::new_checked(ip.payload_mut()).unwrap();
            let m = CsumMode::Complete;
            s.update_pseudo_addr(a(2), nd, m);
            s.set_seq(SeqNum(seq), m);
            s.set_ack(SeqNum(ack), m);
            s.set_window(win, m);
            s.set_timestamps(tv, te, m);
            s.set_mss(mss, m);
            s.set_wscale(ws, m);
            s.strip_sack_permitted(m);
            s.set_flags(flags::ACK | flags::FIN, m);
            prop_assert!(s.verify_checksum(a(1), nd));
            let s2 = Segment::new_checked(s.into_inner()).unwrap();
            prop_assert_eq!(s2.timestamps(), Some((tv, te)));
            prop_assert_eq!(s2.mss(), Some(mss));
            prop_assert!(!s2.sack_permitted());
        }

        // Partial mode: rewriting numbers leaves the pseudo-header sum alone,
        // and an address change updates it like a recomputation.
        #[test]
        fn partial_mode(seq in any::<u32>(), newsrc in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..40)) {
            let r = Repr::new(1, 2, SeqNum(7), SeqNum(9), flags::ACK, 100);
            let mut pkt = r.emit_ipv4(a(1), a(2), &payload);
            let len = (pkt.len() - 20) as u32;
            let ps = checksum::fold(checksum::pseudo_header(a(1), a(2), 6, len));
            pkt[36..38].copy_from_slice(&ps.to_be_bytes());
            let mut s = Segment::new_checked(&mut pkt[20..]).unwrap();
            s.set_seq(SeqNum(seq), CsumMode::Partial);
            prop_assert_eq!(s.checksum(), ps);
            let ns = Ipv4Addr::from(newsrc);
            s.update_pseudo_addr(a(1), ns, CsumMode::Partial);
            let want = checksum::fold(checksum::pseudo_header(ns, a(2), 6, len));
            let got = s.checksum();
            prop_assert!(got == want || (got ^ want) == 0xffff && (got == 0xffff || want == 0xffff));
        }

        // The parser never panics on arbitrary bytes.
        #[test]
        fn parse_arbitrary(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(s) = Segment::new_checked(&bytes[..]) {
                let _ = (s.timestamps(), s.mss(), s.wscale(), s.payload_len(), s.seq_len());
            }
            let _ = ipv4::Packet::new_checked(&bytes[..]);
        }
    }
}
