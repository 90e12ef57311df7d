//! libFuzzer entry point; the harness is `ftnet_fuzz::shim`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ftnet_fuzz::shim::run(data));
