//! A Linux TUN device opened with `IFF_VNET_HDR` and TSO/checksum offloads.
//!
//! Without offloads a user-space forwarder is capped near 140 k packets/s
//! (PLATFORM-NOTES.md: 1.3 Gbit/s); with them every read or write moves up
//! to 64 KB, so the number of syscalls per byte drops tenfold.

use crate::Error;
use ftnet_core::Packet;
use ftnet_wire::vnet::{self, VnetHdr};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Large enough for the biggest GSO super-packet (an IPv4 total length is at
/// most 65535) plus the virtio-net header, with some slack.
pub const RECV_BUF_LEN: usize = 65535 + vnet::LEN + 1024;

/// How to bring the device up.
#[derive(Debug, Clone)]
pub struct TunOptions {
    pub name: String,
    pub mtu: u32,
    /// Long enough that a burst of GSO super-packets written to three
    /// replicas does not overflow the queue (the default of 500 did on veth).
    pub txqueuelen: u32,
    /// Number of queues (file descriptors). More than one opens the device
    /// with `IFF_MULTI_QUEUE`; each queue is read by its own thread.
    pub queues: usize,
}

impl TunOptions {
    pub fn new(name: &str) -> TunOptions {
        TunOptions {
            name: name.to_string(),
            mtu: 1500,
            txqueuelen: 1000,
            queues: 1,
        }
    }
}

/// Read buffers kept for reuse per queue: a GSO super-packet buffer is 64 KB,
/// and allocating (and faulting in) a fresh one for every read showed up in
/// profiles as a second copy of every packet.
const POOL_MAX: usize = 128;

/// An open, non-blocking TUN device. The interface disappears when this is
/// dropped (it is not made persistent), taking its routes with it.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    pool: Vec<Vec<u8>>,
}

/// `struct ifreq` as far as `TUNSETIFF` uses it: the name, then the flags
/// (a `short`) in the union, padded to the union's 24 bytes.
#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tun {
    /// Create (or attach to) the TUN interface `opts.name`, switch on the
    /// virtio-net header and the offloads, and bring the link up.
    pub fn open(opts: &TunOptions) -> Result<Tun, Error> {
        let mut q = Tun::open_queues(&TunOptions {
            queues: 1,
            ..opts.clone()
        })?;
        Ok(q.remove(0))
    }

    /// Create the interface with `opts.queues` queues (at least one) and
    /// return one [`Tun`] per queue; the kernel spreads the packets it sends
    /// into the device over them (see [`crate::steer`] to choose how).
    pub fn open_queues(opts: &TunOptions) -> Result<Vec<Tun>, Error> {
        let n = opts.queues.max(1);
        let first = Tun::open_one(opts, n > 1, &opts.name)?;
        let name = first.name.clone();
        let mut all = vec![first];
        for _ in 1..n {
            all.push(Tun::open_one(opts, true, &name)?);
        }
        // Before the link goes up: an IPv6-enabled TUN sends router
        // solicitations and MLD reports into our own read path, and the
        // router is IPv4 only. The setting dies with the device.
        let v6 = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
        if std::path::Path::new(&v6).exists() {
            std::fs::write(&v6, "1").map_err(|source| Error::Sysctl {
                path: v6.clone(),
                source,
            })?;
        }
        crate::netlink::link_up(&name, opts.mtu, opts.txqueuelen)?;
        Ok(all)
    }

    /// Open one queue of the device `name` (creating it if it is the first).
    fn open_one(opts: &TunOptions, multi: bool, name: &str) -> Result<Tun, Error> {
        let _ = opts;
        let name = &name.to_string();
        if name.is_empty()
            || name.len() >= libc::IFNAMSIZ
            || name
                .bytes()
                .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
        {
            return Err(Error::BadName(name.clone()));
        }
        let terr = |op: &'static str| Error::Tun {
            op,
            name: name.clone(),
            source: io::Error::last_os_error(),
        };
        let path = CString::new("/dev/net/tun").map_err(|_| Error::BadName(name.clone()))?;
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(terr("open /dev/net/tun"));
        }
        // SAFETY: `raw` was just returned by open(2), is valid and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        let mq = if multi { libc::IFF_MULTI_QUEUE } else { 0 };
        // The IFF_* flags all lie in the low 16 bits (linux/if_tun.h).
        #[allow(clippy::cast_possible_truncation)]
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR | mq) as libc::c_short;
        req.flags = flags;
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `req` has its
        // layout (16-byte name, then a 24-byte union starting with the flags)
        // and lives across the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReqFlags) } < 0
        {
            return Err(terr("ioctl TUNSETIFF (IFF_TUN|IFF_NO_PI|IFF_VNET_HDR)"));
        }
        // The kernel may have completed a name pattern such as "ftnet%d".
        let actual: Vec<u8> = req
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let name = String::from_utf8_lossy(&actual).into_owned();

        let hdr_len = libc::c_int::try_from(vnet::LEN).unwrap_or(libc::c_int::MAX);
        // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer, which
        // points to a live local.
        if unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETVNETHDRSZ,
                &hdr_len as *const libc::c_int,
            )
        } < 0
        {
            return Err(Error::Tun {
                op: "ioctl TUNSETVNETHDRSZ 10",
                name,
                source: io::Error::last_os_error(),
            });
        }
        // The kernel may then hand us TCPv4/v6 GSO super-packets whose TCP
        // checksum is partial (pseudo-header only), and accepts the same
        // from us; it finishes the work when segmenting.
        let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
        // SAFETY: TUNSETOFFLOAD takes the flags as the integer argument itself,
        // no memory is passed.
        if unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                offloads as libc::c_ulong,
            )
        } < 0
        {
            return Err(Error::Tun {
                op: "ioctl TUNSETOFFLOAD (CSUM|TSO4|TSO6|TSO_ECN)",
                name,
                source: io::Error::last_os_error(),
            });
        }

        Ok(Tun {
            fd,
            name,
            pool: Vec::new(),
        })
    }

    /// Attach a steering program (an eBPF socket-filter program whose return
    /// value, modulo the number of queues, picks the queue of each packet).
    pub fn set_steering(&self, prog_fd: RawFd) -> Result<(), Error> {
        let fd: libc::c_int = prog_fd;
        // SAFETY: TUNSETSTEERINGEBPF reads one `int` (the program fd) through
        // the pointer, which points to a live local.
        if unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                TUNSETSTEERINGEBPF,
                &fd as *const libc::c_int,
            )
        } < 0
        {
            return Err(Error::Tun {
                op: "ioctl TUNSETSTEERINGEBPF",
                name: self.name.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Give a packet buffer back for a later read (buffers too small for a
    /// super-packet are dropped).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() >= RECV_BUF_LEN - vnet::LEN && self.pool.len() < POOL_MAX {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read one packet straight into a pooled buffer (the virtio-net header
    /// into a stack array, the IP packet into the buffer: no second copy).
    /// `Ok(None)` when nothing is queued. `_scratch` is unused and kept for
    /// the [`crate::Device`] signature.
    pub fn recv(&mut self, _scratch: &mut [u8]) -> io::Result<Option<Packet>> {
        let mut data = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(RECV_BUF_LEN - vnet::LEN));
        let cap = data.capacity();
        let mut hdr = [0u8; vnet::LEN];
        let iov = [
            libc::iovec {
                iov_base: hdr.as_mut_ptr().cast(),
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: cap,
            },
        ];
        let iovcnt = libc::c_int::try_from(iov.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: both iovecs point to writable memory of the given lengths
        // (`hdr` on the stack, `data`'s spare capacity) for the whole call.
        let n = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), iovcnt) };
        if n < 0 {
            let e = io::Error::last_os_error();
            self.pool.push(data);
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let n = n as usize;
        // Every read starts with the virtio-net header; anything shorter is a
        // kernel/ABI mismatch, not a packet.
        let vnet = VnetHdr::parse(&hdr)
            .ok()
            .filter(|_| n >= vnet::LEN)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("TUN read of {n} bytes has no virtio-net header"),
                )
            })?;
        let len = (n - vnet::LEN).min(cap);
        // SAFETY: the kernel wrote `len` bytes (at most `cap`) into the spare
        // capacity; u8 has no invalid bit patterns.
        unsafe { data.set_len(len) };
        Ok(Some(Packet { vnet, data }))
    }

    /// Write one packet: the virtio-net header and the IPv4 packet in one
    /// `writev`, so the payload is not copied into a staging buffer.
    pub fn send(&mut self, pkt: &Packet) -> io::Result<()> {
        let mut hdr = [0u8; vnet::LEN];
        pkt.vnet.emit(&mut hdr);
        let iov = [
            libc::iovec {
                iov_base: hdr.as_mut_ptr().cast(),
                iov_len: hdr.len(),
            },
            // writev never writes through iov_base; the cast to *mut is what the C type requires.
            libc::iovec {
                iov_base: pkt.data.as_ptr() as *mut libc::c_void,
                iov_len: pkt.data.len(),
            },
        ];
        let iovcnt = libc::c_int::try_from(iov.len()).unwrap_or(libc::c_int::MAX);
        loop {
            // SAFETY: both iovecs point to live buffers of the given lengths
            // (`hdr` on the stack, `pkt.data` borrowed) for the whole call.
            let n = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iovcnt) };
            if n >= 0 {
                // A TUN write is all or nothing: the kernel takes the packet whole.
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// `_IOW('T', 224, int)`: not in the libc crate.
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x800454e0;

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
