//! One fuzz run: `cargo run --release -p ftnet-sim --example fuzz1 -- SEED REPLICAS`.
fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let p = ftnet_sim::Params {
        fuzz_packets: 3000,
        ..ftnet_sim::Params::basic(usize::try_from(*a.get(1).unwrap_or(&1)).unwrap_or(1))
    };
    match ftnet_sim::run(*a.first().unwrap_or(&0), &p) {
        Ok(r) => println!("ok {r:?}"),
        Err(e) => println!("{e}"),
    }
}
