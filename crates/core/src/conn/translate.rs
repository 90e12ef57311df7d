//! Pure header translation rules between the client's view and a
//! replica's.

use ftnet_wire::tcp::CsumMode;
use ftnet_wire::vnet::VnetHdr;
use ftnet_wire::SeqNum;

/// TSecr for a replica: the client echoes router TSvals; map them back to
/// this replica's clock (§III-D), never beyond the latest TSval it sent.
/// `ts_off` is the router's TSval minus the replica's when last
/// translated, `ts_last` the latest TSval the replica sent.
pub(super) fn translate_tsecr(e: u32, ts_off: u32, ts_last: u32) -> u32 {
    if e == 0 {
        return 0;
    }
    let t = e.wrapping_sub(ts_off);
    if SeqNum(t).is_after(SeqNum(ts_last)) {
        ts_last
    } else {
        t
    }
}

/// The window field for the client given the group's ACK and right edge
/// (§III-D: the minimum over the replicas) and the window scale announced
/// to the client (RFC 7323 §2.3: the field is the window shifted right by
/// the scale, at most 65535).
pub(super) fn window_field(ack: SeqNum, edge: SeqNum, ws_out: u8) -> u16 {
    let bytes = edge.diff(ack).max(0) as u32;
    (bytes >> ws_out).min(0xffff) as u16
}

/// Checksum mode from the offload header: a partial checksum when the
/// kernel asked for one to be completed, else a complete one.
pub fn csum_mode(v: &VnetHdr) -> CsumMode {
    if v.needs_csum() {
        CsumMode::Partial
    } else {
        CsumMode::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsecr_maps_back_to_the_replica_clock() {
        // The router's clock runs 1000 ticks ahead of this replica's.
        assert_eq!(translate_tsecr(5000, 1000, 4500), 4000);
        // Never beyond the newest TSval the replica sent.
        assert_eq!(translate_tsecr(6000, 1000, 4500), 4500);
        // Zero is "no echo" (RFC 7323 §3.2) and stays zero.
        assert_eq!(translate_tsecr(0, 1000, 4500), 0);
        // Across the wrap of the 32-bit clock.
        assert_eq!(translate_tsecr(0x10, 0x1000, 0xffff_f100), 0xffff_f010);
        assert_eq!(translate_tsecr(0x10, 0x1000, 0xffff_f000), 0xffff_f000);
    }

    #[test]
    fn window_field_scales_and_caps() {
        let ack = SeqNum(100);
        assert_eq!(window_field(ack, ack.add(1000), 0), 1000);
        assert_eq!(window_field(ack, ack.add(70_000), 0), 0xffff);
        assert_eq!(window_field(ack, ack.add(70_000), 2), 17_500);
        // An edge behind the ACK is a closed window, not a huge one.
        assert_eq!(window_field(ack, SeqNum(50), 0), 0);
        // Across the wrap of sequence space.
        let ack = SeqNum(0xffff_fff0);
        assert_eq!(window_field(ack, ack.add(0x40), 0), 0x40);
        assert_eq!(window_field(ack, ack.add(1 << 20), 7), 1 << 13);
    }
}
