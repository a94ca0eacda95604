//! Echo frames: length- and newline-delimited decoding over arbitrary chunking, and re-encoding.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stampede_target_servers::fuzzing::echo_decoder(data);
});
