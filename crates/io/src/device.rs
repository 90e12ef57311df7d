//! The seam between the data-plane loop and the kernel: a packet device.
//! The TUN implements it; [`MemDevice`] is the in-memory fake the loop's
//! tests use (wireguard-go `tun/tuntest` does the same).

use ftnet_core::Packet;
use std::collections::VecDeque;
use std::io;

/// Something packets are read from and written to.
pub trait Device {
    /// One packet, or `Ok(None)` when nothing is queued (never blocks).
    /// `buf` is scratch space of at least [`crate::RECV_BUF_LEN`] bytes.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Packet>>;
    /// Hand one packet to the network.
    fn send(&mut self, pkt: &Packet) -> io::Result<()>;
    /// Take back a packet buffer that is no longer needed, for reuse.
    fn recycle(&mut self, _buf: Vec<u8>) {}
}

impl Device for crate::Tun {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Packet>> {
        crate::Tun::recv(self, buf)
    }
    fn send(&mut self, pkt: &Packet) -> io::Result<()> {
        crate::Tun::send(self, pkt)
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        crate::Tun::recycle(self, buf)
    }
}

/// An in-memory device: tests push packets into `rx` and inspect `tx`.
#[derive(Debug, Default)]
pub struct MemDevice {
    /// Packets the loop will read, front first.
    pub rx: VecDeque<Packet>,
    /// Packets the loop wrote, in order.
    pub tx: Vec<Packet>,
    /// When set, every send fails with this error kind (fault injection).
    pub fail_sends: Option<io::ErrorKind>,
}

impl Device for MemDevice {
    fn recv(&mut self, _buf: &mut [u8]) -> io::Result<Option<Packet>> {
        Ok(self.rx.pop_front())
    }
    fn send(&mut self, pkt: &Packet) -> io::Result<()> {
        if let Some(kind) = self.fail_sends {
            return Err(io::Error::new(kind, "injected send failure"));
        }
        self.tx.push(pkt.clone());
        Ok(())
    }
}
