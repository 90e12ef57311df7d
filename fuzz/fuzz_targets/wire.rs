//! libFuzzer entry point; the harness is `ftnet_fuzz::wire`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ftnet_fuzz::wire::run(data));
