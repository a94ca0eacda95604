//! Login frames: length-prefixed decoding, JSON request parsing, table lookup, answer encoding.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stampede_target_servers::fuzzing::login_decoder(data);
});
