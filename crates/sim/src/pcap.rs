//! A minimal pcap writer (LINKTYPE_RAW = 101: packets start at the IPv4
//! header) for looking at a failing seed in Wireshark or tcpdump.

use std::fs::File;
use std::io::{BufWriter, Write};

pub struct PcapWriter {
    out: BufWriter<File>,
}

impl PcapWriter {
    pub fn create(path: &str) -> std::io::Result<PcapWriter> {
        let mut out = BufWriter::new(File::create(path)?);
        // Global header: magic, version 2.4, thiszone, sigfigs, snaplen,
        // network.
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&65535u32.to_le_bytes())?;
        out.write_all(&101u32.to_le_bytes())?;
        Ok(PcapWriter { out })
    }

    pub fn packet(&mut self, t_us: u64, data: &[u8]) {
        let n = u32::try_from(data.len().min(65535)).unwrap_or(65535);
        let _ = self
            .out
            .write_all(&ftnet_wire::mod32(t_us / 1_000_000).to_le_bytes());
        let _ = self
            .out
            .write_all(&((t_us % 1_000_000) as u32).to_le_bytes());
        let _ = self.out.write_all(&n.to_le_bytes());
        let _ = self
            .out
            .write_all(&ftnet_wire::len32(data.len()).to_le_bytes());
        let _ = self.out.write_all(&data[..n as usize]);
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}
