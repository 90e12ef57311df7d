//! Queue steering for a multi-queue TUN: a short eBPF program, assembled
//! here (no compiler, no object file), that splits the queues into two
//! halves: packets addressed to a virtual IP (from clients) go to the first
//! half, everything else (replica replies, ICMP) to the second. Within a half
//! the queue is a hash of the *client* end of the connection — the source of
//! a VIP-bound packet, the destination of a reply — so every packet of one
//! connection, whichever replica sent it, meets the same thread.
//!
//! Why by direction: the router's work for one connection is split over
//! both directions. A client's ACK, written to the replicas, makes their
//! kernels send more data from inside that `write` (the replicas' TCP
//! transmit path runs in the writer's softirq); a replica's data, written to
//! the client, runs the client's TCP receive path. With a thread per
//! direction these run on two cores even for a single connection, and the
//! order of each direction is kept: every byte the client receives is written
//! by one replica-side thread, every byte a replica receives by one
//! client-side thread. The kernel's default (a hash of the flow) would put a
//! connection's client flow and its replicas' flows on queues at random.

use crate::Error;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{FromRawFd, OwnedFd};

/// At most this many VIPs are compared in the program (one instruction each).
pub const MAX_VIPS: usize = 512;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst_reg in the low nibble, src_reg in the high nibble.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

const LD_ABS_W: u8 = 0x20; // BPF_LD | BPF_ABS | BPF_W
const LD_ABS_H: u8 = 0x28; // BPF_LD | BPF_ABS | BPF_H
const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const XOR64_X: u8 = 0xaf; // BPF_ALU64 | BPF_XOR | BPF_X
const MUL32_K: u8 = 0x24; // BPF_ALU | BPF_MUL | BPF_K
const RSH32_K: u8 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
const MOD32_K: u8 = 0x94; // BPF_ALU | BPF_MOD | BPF_K
const ADD32_X: u8 = 0x0c; // BPF_ALU | BPF_ADD | BPF_X
const JEQ32_K: u8 = 0x16; // BPF_JMP32 | BPF_JEQ | BPF_K
const JA: u8 = 0x05; // BPF_JMP | BPF_JA
const EXIT: u8 = 0x95;

const fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// The program for `per_side` queues per direction (2 × `per_side` queues):
///
/// ```text
///   dst = ip.dst; if dst in VIPs: key = ip.src ^ tcp.sport, base = 0
///                 else:           key = ip.dst ^ tcp.dport, base = per_side
///   return base + (key * 0x9E3779B1 >> 16) % per_side
/// ```
///
/// Ports are read at offset 20, i.e. assuming a 20-byte IPv4 header; a
/// packet with IP options is still steered consistently, just by other
/// bytes. A packet too short for the loads makes `LD_ABS` end the program
/// with 0 (queue 0); the core drops it as malformed either way.
pub fn program(vips: &[Ipv4Addr], per_side: usize) -> Vec<Insn> {
    let vips = &vips[..vips.len().min(MAX_VIPS)];
    // Queues per side are few (a TUN device has at most 256 queues).
    let k = i32::try_from(per_side.max(1)).unwrap_or(i32::MAX);
    let mut p = vec![
        // LD_ABS reads relative to the context in r6.
        ins(MOV64_X, 6, 1, 0, 0),
        // Destination address, offset 16 of the IPv4 header, host order.
        ins(LD_ABS_W, 0, 0, 0, 16),
    ];
    let n = vips.len();
    // After the compares: the replica side (5 instructions), then the client side.
    for (i, v) in vips.iter().enumerate() {
        let skip = (n - i - 1) + 5;
        // At most MAX_VIPS + 5 instructions ahead.
        let skip = i16::try_from(skip).unwrap_or(i16::MAX);
        p.push(ins(JEQ32_K, 0, 0, skip, u32::from(*v) as i32));
    }
    // Replica side: key = dst ^ dport (the client's address and port).
    p.push(ins(MOV64_X, 7, 0, 0, 0));
    p.push(ins(LD_ABS_H, 0, 0, 0, 22));
    p.push(ins(XOR64_X, 0, 7, 0, 0));
    p.push(ins(MOV64_K, 8, 0, 0, k));
    p.push(ins(JA, 0, 0, 5, 0));
    // Client side: key = src ^ sport.
    p.push(ins(LD_ABS_W, 0, 0, 0, 12));
    p.push(ins(MOV64_X, 7, 0, 0, 0));
    p.push(ins(LD_ABS_H, 0, 0, 0, 20));
    p.push(ins(XOR64_X, 0, 7, 0, 0));
    p.push(ins(MOV64_K, 8, 0, 0, 0));
    // Hash: Fibonacci multiply, upper bits, modulo the side's queues, plus its base.
    p.push(ins(MUL32_K, 0, 0, 0, 0x9E37_79B1_u32 as i32));
    p.push(ins(RSH32_K, 0, 0, 0, 16));
    p.push(ins(MOD32_K, 0, 0, 0, k));
    p.push(ins(ADD32_X, 0, 8, 0, 0));
    p.push(ins(EXIT, 0, 0, 0, 0));
    p
}

/// The queue [`program`] picks, computed in Rust: the reference the tests
/// hold the kernel's answer to.
pub fn queue_of(packet: &[u8], vips: &[Ipv4Addr], per_side: usize) -> usize {
    let k = u32::try_from(per_side.max(1)).unwrap_or(u32::MAX);
    if packet.len() < 24 {
        return 0;
    }
    let w = |o: usize| u32::from_be_bytes([packet[o], packet[o + 1], packet[o + 2], packet[o + 3]]);
    let h = |o: usize| u16::from_be_bytes([packet[o], packet[o + 1]]) as u32;
    let dst = w(16);
    let (key, base) = if vips.iter().any(|v| u32::from(*v) == dst) {
        (w(12) ^ h(20), 0)
    } else {
        (dst ^ h(22), k)
    };
    (base + (key.wrapping_mul(0x9E37_79B1) >> 16) % k) as usize
}

/// `union bpf_attr` as far as `BPF_PROG_LOAD` uses it (kernel ≥ 5.x layout).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// Load the steering program for `vips` into the kernel; the returned fd
/// keeps it alive until the TUN holds its own reference.
pub fn load(vips: &[Ipv4Addr], per_side: usize) -> Result<OwnedFd, Error> {
    let insns = program(vips, per_side);
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let mut name = [0u8; 16];
    name[..11].copy_from_slice(b"ftnet_steer");
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        // A few dozen instructions and a 4 KiB log: both fit u32.
        insn_cnt: u32::try_from(insns.len()).unwrap_or(u32::MAX),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: u32::try_from(log.len()).unwrap_or(u32::MAX),
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        ..Default::default()
    };
    // SAFETY: bpf(2) reads `size_of::<ProgLoadAttr>()` bytes of `attr`, and
    // through it the instruction array, the license string and the log
    // buffer, all of which live across the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoadAttr,
            u32::try_from(std::mem::size_of::<ProgLoadAttr>()).unwrap_or(u32::MAX),
        )
    };
    if fd < 0 {
        let source = io::Error::last_os_error();
        let verifier =
            String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)])
                .trim()
                .to_string();
        return Err(Error::Bpf {
            what: "loading the TUN steering program",
            verifier,
            source,
        });
    }
    // bpf(2) returns an int fd widened to the syscall's long.
    let fd = i32::try_from(fd).map_err(|_| Error::Bpf {
        what: "loading the TUN steering program (fd out of range)",
        verifier: String::new(),
        source: io::Error::from(io::ErrorKind::InvalidData),
    })?;
    // SAFETY: the kernel just returned this fd and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walk the program's jumps for a VIP hit and a miss: each lands on the
    /// instruction the layout promises.
    #[test]
    fn program_jumps_land_where_intended() {
        let vips = [
            Ipv4Addr::new(198, 19, 0, 1),
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(203, 0, 113, 9),
        ];
        let p = program(&vips, 3);
        let n = vips.len();
        assert_eq!(p.len(), 2 + n + 5 + 5 + 5);
        let client_side = 2 + n + 5;
        for (i, v) in vips.iter().enumerate() {
            let at = 2 + i;
            assert_eq!(p[at].code, JEQ32_K);
            assert_eq!(p[at].imm as u32, u32::from(*v));
            // eBPF jump targets are relative to the next instruction.
            assert_eq!(at + 1 + p[at].off as usize, client_side, "compare {i}");
        }
        let ja = 2 + n + 4;
        assert_eq!(p[ja].code, JA);
        assert_eq!(
            ja + 1 + p[ja].off as usize,
            client_side + 5,
            "replica side joins the hash"
        );
        assert_eq!(p[2 + n + 3].imm, 3, "replica side base = per_side");
        assert_eq!(p[client_side + 4].imm, 0, "client side base = 0");
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }

    #[test]
    fn reference_keeps_a_connection_on_one_queue_per_side() {
        let vip = Ipv4Addr::new(198, 19, 0, 1);
        let pkt = |src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16| {
            let mut b = vec![0u8; 40];
            b[0] = 0x45;
            b[12..16].copy_from_slice(&src);
            b[16..20].copy_from_slice(&dst);
            b[20..22].copy_from_slice(&sp.to_be_bytes());
            b[22..24].copy_from_slice(&dp.to_be_bytes());
            b
        };
        for per_side in 1..=4 {
            for cport in 40000..40050u16 {
                let up = queue_of(
                    &pkt([198, 18, 1, 2], [198, 19, 0, 1], cport, 80),
                    &[vip],
                    per_side,
                );
                assert!(up < per_side);
                // The replies of three replicas to that client port share a queue.
                let downs: Vec<usize> = (11..14)
                    .map(|r| {
                        queue_of(
                            &pkt([198, 18, r, 2], [198, 18, 1, 2], 80, cport),
                            &[vip],
                            per_side,
                        )
                    })
                    .collect();
                assert!(
                    downs
                        .iter()
                        .all(|&q| q == downs[0] && q >= per_side && q < 2 * per_side),
                    "{downs:?}"
                );
            }
        }
    }
}
