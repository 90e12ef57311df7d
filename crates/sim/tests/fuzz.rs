//! Bad input: thousands of random and mutated packets (random bytes,
//! truncations, single bit flips, header oddities, segments of unknown
//! connections with random flags and numbers, SYN floods) thrown at the
//! router while a valid connection runs. The router must not panic, must
//! emit only well-formed packets, and the valid connection must complete
//! with an exact echo at the client and every replica.

use ftnet_sim::{run, Params};

#[test]
fn garbage_interleaved_with_a_valid_connection() {
    let n: u64 = std::env::var("FTNET_SIM_FUZZ_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut failures = Vec::new();
    for seed in 0..n {
        let replicas = 1 + (seed % 3) as usize;
        let p = Params {
            fuzz_packets: 3000,
            ..Params::basic(replicas)
        };
        if let Err(e) = run(seed, &p) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} fuzz runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Same, through the plain forwarder: proves the fuzz generator itself
/// leaves the valid connection alone.
#[test]
fn garbage_through_forwarder() {
    for seed in 0..3 {
        let p = Params {
            fuzz_packets: 3000,
            ..Params::direct()
        };
        run(seed, &p).unwrap_or_else(|e| panic!("{e}"));
    }
}
