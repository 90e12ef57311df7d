//! libFuzzer entry point; the harness is `ftnet_fuzz::router`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ftnet_fuzz::router::run(data));
