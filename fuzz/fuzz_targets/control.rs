//! libFuzzer entry point; the harness is `ftnet_fuzz::control`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ftnet_fuzz::control::run(data));
