//! The unit of I/O between the core and its driver.

use ftnet_wire::vnet::VnetHdr;
use ftnet_wire::{ipv4, tcp};

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

/// Where the headers of a packet lie, found once when the router classified
/// it (`new_checked` on the IPv4 header and the TCP header with its
/// options): every copy of the packet is then read and rewritten through
/// these offsets, never parsed again. Made only from checked views; valid
/// for those bytes and their copies, whose lengths the core never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Headers {
    /// IPv4 header length.
    ip: usize,
    /// IPv4 total length (the end of the TCP segment).
    end: usize,
    /// TCP header length.
    tcp: usize,
    /// The TCP options' offsets.
    opts: tcp::OptionOffsets,
}

impl Headers {
    /// The headers of a segment the core describes itself without bytes
    /// (the client's SYN of an adopted connection, test fixtures): 20-byte
    /// IPv4 and TCP headers, no options. Never used to rewrite a packet.
    pub(crate) const BARE: Headers = Headers {
        ip: 20,
        end: 40,
        tcp: 20,
        opts: tcp::OptionOffsets {
            mss: None,
            wscale: None,
            sack_perm: None,
            sack: None,
            timestamp: None,
        },
    };

    /// The offsets of a packet whose views passed `new_checked`.
    pub(crate) fn of<T: AsRef<[u8]>, U: AsRef<[u8]>>(
        ip: &ipv4::Packet<T>,
        t: &tcp::Segment<U>,
    ) -> Headers {
        Headers {
            ip: ip.header_len(),
            end: ip.total_len(),
            tcp: t.header_len(),
            opts: t.options(),
        }
    }

    /// The TCP payload of the packet (or of a copy of it).
    pub(crate) fn payload<'a>(&self, p: &'a Packet) -> &'a [u8] {
        &p.data[self.ip + self.tcp..self.end]
    }

    /// Apply header edits to the packet (or a copy of it) through views
    /// built from the offsets. Returns the offsets after the edits (an
    /// option stripped is gone from them).
    pub(crate) fn rewrite(
        self,
        p: &mut Packet,
        f: impl FnOnce(&mut ipv4::Packet<&mut [u8]>, &mut tcp::Segment<&mut [u8]>),
    ) -> Headers {
        let (h, rest) = p.data[..self.end].split_at_mut(self.ip);
        let mut ip = ipv4::Packet::new_unchecked(h);
        let mut t = tcp::Segment::with_options(rest, self.opts);
        f(&mut ip, &mut t);
        Headers {
            opts: t.options(),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftnet_wire::tcp::{flags, CsumMode, Repr};
    use ftnet_wire::{checksum, SeqNum};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const V: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn segment(payload: &[u8], ts: Option<(u32, u32)>) -> Packet {
        let mut r = Repr::new(1000, 80, SeqNum(7), SeqNum(9), flags::ACK, 512);
        r.timestamps = ts;
        Packet::plain(r.emit_ipv4(C, V, payload))
    }

    /// The offsets as classification finds them.
    fn headers(p: &Packet) -> Headers {
        let ip = ipv4::Packet::new_checked(&p.data[..]).unwrap();
        let t = tcp::Segment::new_checked(ip.payload()).unwrap();
        Headers::of(&ip, &t)
    }

    #[test]
    fn the_payload_is_found_through_the_offsets() {
        for body in [&b"hello"[..], b""] {
            let p = segment(body, Some((1, 2)));
            assert_eq!(headers(&p).payload(&p), body);
            // A copy is read through the same offsets.
            let q = p.clone();
            assert_eq!(headers(&p).payload(&q), body);
        }
    }

    #[test]
    fn a_rewrite_edits_the_packet_and_keeps_its_checksum() {
        let mut p = segment(b"abc", None);
        let r = Ipv4Addr::new(10, 0, 1, 5);
        let at = headers(&p);
        at.rewrite(&mut p, |ip, t| {
            ip.set_dst(r);
            t.update_pseudo_addr(V, r, CsumMode::Complete);
            t.set_ack(SeqNum(42), CsumMode::Complete);
        });
        let ip = ipv4::Packet::new_checked(&p.data[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst(), r);
        let t = tcp::Segment::new_checked(ip.payload()).unwrap();
        assert_eq!(t.ack(), SeqNum(42));
        assert!(t.verify_checksum(C, r));
        assert_eq!(at.payload(&p), b"abc");
    }

    /// Stripping an option is remembered in the offsets returned.
    #[test]
    fn a_stripped_option_leaves_the_offsets() {
        let mut r = Repr::new(1000, 80, SeqNum(7), SeqNum(0), flags::SYN, 512);
        r.sack_permitted = true;
        let mut p = Packet::plain(r.emit_ipv4(C, V, &[]));
        let at = headers(&p);
        assert!(at.opts.sack_perm.is_some());
        let after = at.rewrite(&mut p, |_, t| t.strip_sack_permitted(CsumMode::Complete));
        assert_eq!(after.opts.sack_perm, None);
        assert_eq!(after, headers(&p));
    }

    /// One translation of a segment in either direction: the address the
    /// router rewrites (RFC 9293 §3.1 pseudo header), sequence and
    /// acknowledgment numbers (§3.4), the window field (§3.10.7.4) and the
    /// timestamps (RFC 7323 §3), each with the checksum kept right
    /// incrementally (RFC 1624 §3).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Edit {
        dst: Ipv4Addr,
        seq: SeqNum,
        ack: SeqNum,
        window: u16,
        ts: (u32, u32),
    }

    fn apply(p: &mut Packet, at: Headers, from: Ipv4Addr, e: Edit, mode: CsumMode) {
        at.rewrite(p, |ip, t| {
            ip.set_dst(e.dst);
            t.update_pseudo_addr(from, e.dst, mode);
            t.set_seq(e.seq, mode);
            t.set_ack(e.ack, mode);
            t.set_window(e.window, mode);
            t.set_timestamps(e.ts.0, e.ts.1, mode);
        });
    }

    fn current(p: &Packet) -> Edit {
        let ip = ipv4::Packet::new_checked(&p.data[..]).unwrap();
        let t = tcp::Segment::new_checked(ip.payload()).unwrap();
        Edit {
            dst: ip.dst(),
            seq: t.seq(),
            ack: t.ack(),
            window: t.window(),
            ts: t.timestamps().unwrap(),
        }
    }

    proptest! {
        /// Undoing a rewrite gives the original packet, byte for byte,
        /// checksums included, in complete and in partial (offload)
        /// checksum mode; and in between the packet is valid.
        #[test]
        fn undoing_a_rewrite_gives_the_original_packet(
            body in proptest::collection::vec(any::<u8>(), 0..64),
            dst in any::<u32>(), seq in any::<u32>(), ack in any::<u32>(),
            window in any::<u16>(), tsval in any::<u32>(), tsecr in any::<u32>(),
            ts0 in any::<(u32, u32)>(), partial in any::<bool>(),
        ) {
            let original = segment(&body, Some(ts0));
            let mode = if partial { CsumMode::Partial } else { CsumMode::Complete };
            let mut p = original.clone();
            if partial {
                // A partial checksum holds only the pseudo header's sum
                // (RFC 1071 sum, folded, not inverted; virtio-net offload).
                let len = u32::try_from(p.data.len() - 20).unwrap();
                let ps = checksum::fold(checksum::pseudo_header(C, V, 6, len));
                p.data[36..38].copy_from_slice(&ps.to_be_bytes());
            }
            let before = p.clone();
            let at = headers(&p);
            let back = current(&p);
            let e = Edit {
                dst: Ipv4Addr::from(dst),
                seq: SeqNum(seq),
                ack: SeqNum(ack),
                window,
                ts: (tsval, tsecr),
            };
            apply(&mut p, at, V, e, mode);
            prop_assert_eq!(current(&p), e);
            let ip = ipv4::Packet::new_checked(&p.data[..]).unwrap();
            prop_assert!(ip.verify_checksum());
            if !partial {
                let t = tcp::Segment::new_checked(ip.payload()).unwrap();
                prop_assert!(t.verify_checksum(C, e.dst));
            }
            apply(&mut p, at, e.dst, back, mode);
            prop_assert_eq!(p, before);
        }
    }
}
