//! Queue steering for a multi-queue TUN: a ten-odd-instruction eBPF program,
//! assembled here (no compiler, no object file), that sends every packet
//! addressed to a virtual IP to queue 0 and everything else (replies of the
//! replicas, ICMP) to queue 1.
//!
//! Why by direction and not by flow: the router's work for one connection
//! is split over both directions. A client's ACK, written to the replicas,
//! makes their kernels send more data from inside that `write` (the replicas'
//! TCP transmit path runs in the writer's softirq); a replica's data, written
//! to the client, runs the client's TCP receive path. With one thread per
//! direction these run on two cores even for a single connection, and the
//! order of each direction is kept: every byte the client receives is
//! written by the replica-side thread, every byte a replica receives by the
//! client-side thread. The kernel's default (a hash of the flow) would put a
//! connection's client flow and its replicas' flows on queues at random.

use crate::Error;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{FromRawFd, OwnedFd};

/// Queue of packets addressed to a virtual IP (from clients).
pub const QUEUE_CLIENT: usize = 0;
/// Queue of every other packet (replica replies, ICMP).
pub const QUEUE_REPLICA: usize = 1;

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

const BPF_LD_ABS_W: u8 = 0x20; // BPF_LD | BPF_ABS | BPF_W
const BPF_MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const BPF_MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const BPF_JEQ32_K: u8 = 0x16; // BPF_JMP32 | BPF_JEQ | BPF_K
const BPF_EXIT: u8 = 0x95;

/// The program: `r0 = ntohl(ip.dst); if r0 == vip_k: return 0; ...; return 1`.
/// A packet too short for an IPv4 header makes `LD_ABS` end the program
/// with 0, i.e. queue 0; the core drops it as malformed either way.
pub fn program(vips: &[Ipv4Addr]) -> Vec<Insn> {
    let vips = &vips[..vips.len().min(MAX_VIPS)];
    let mut p = vec![
        // LD_ABS reads relative to the context in r6.
        Insn { code: BPF_MOV64_X, regs: 6 | (1 << 4), off: 0, imm: 0 },
        // Destination address, offset 16 of the IPv4 header, host order.
        Insn { code: BPF_LD_ABS_W, regs: 0, off: 0, imm: 16 },
    ];
    let n = vips.len();
    for (k, v) in vips.iter().enumerate() {
        // Jump over the remaining compares and the "return 1" pair.
        let skip = (n - k - 1) + 2;
        p.push(Insn { code: BPF_JEQ32_K, regs: 0, off: skip as i16, imm: u32::from(*v) as i32 });
    }
    p.push(Insn { code: BPF_MOV64_K, regs: 0, off: 0, imm: QUEUE_REPLICA as i32 });
    p.push(Insn { code: BPF_EXIT, regs: 0, off: 0, imm: 0 });
    p.push(Insn { code: BPF_MOV64_K, regs: 0, off: 0, imm: QUEUE_CLIENT as i32 });
    p.push(Insn { code: BPF_EXIT, regs: 0, off: 0, imm: 0 });
    p
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
pub fn load(vips: &[Ipv4Addr]) -> Result<OwnedFd, Error> {
    let insns = program(vips);
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let mut name = [0u8; 16];
    name[..11].copy_from_slice(b"ftnet_steer");
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
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
            std::mem::size_of::<ProgLoadAttr>() as u32,
        )
    };
    if fd < 0 {
        let source = io::Error::last_os_error();
        let verifier = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).trim().to_string();
        return Err(Error::Bpf { what: "loading the TUN steering program", verifier, source });
    }
    // SAFETY: the kernel just returned this fd and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_jumps_land_on_return_zero() {
        let vips = [Ipv4Addr::new(198, 19, 0, 1), Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(203, 0, 113, 9)];
        let p = program(&vips);
        assert_eq!(p.len(), 2 + vips.len() + 4);
        let ret0 = p.len() - 2;
        for k in 0..vips.len() {
            let at = 2 + k;
            assert_eq!(p[at].code, BPF_JEQ32_K);
            assert_eq!(p[at].imm as u32, u32::from(vips[k]));
            // eBPF jump targets are relative to the next instruction.
            assert_eq!(at + 1 + p[at].off as usize, ret0, "compare {k}");
        }
        assert_eq!(p[ret0].imm, QUEUE_CLIENT as i32);
        assert_eq!(p[ret0 - 2].imm, QUEUE_REPLICA as i32);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
