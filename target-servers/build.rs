//! Generates the gRPC target's code from `proto/stampede/target/v1/target.proto` with protox
//! (a pure-Rust protobuf compiler, so no system `protoc`), and keeps the encoded descriptors
//! for the server reflection service.

use std::path::PathBuf;

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "stampede/target/v1/target.proto";
    println!("cargo:rerun-if-changed=proto/{proto}");
    let fds = protox::compile([proto], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("target_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
