//! Run one seed and print the outcome: `cargo run --release -p ftnet-sim
//! --example one -- SEED [direct]`. Env: FTNET_SIM_TRACE=1, FTNET_SIM_PCAP=path.
fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut p = ftnet_sim::Params::random(seed);
    if std::env::args().nth(2).as_deref() == Some("direct") {
        p.mode = ftnet_sim::Mode::Direct;
        p.replicas = 1;
        p.replica.truncate(1);
        p.crash = None;
    }
    match ftnet_sim::run(seed, &p) {
        Ok(r) => println!("ok {r:?}"),
        Err(e) => println!("{e}"),
    }
}
