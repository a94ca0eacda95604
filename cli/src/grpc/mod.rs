//! The schema of a scenario's gRPC steps, resolved once here and nowhere else: `.proto` files
//! compiled with protox (no `protoc`), or the target's server reflection service
//! (`grpc.reflection.v1`). Each step's message (protobuf JSON) is checked against its method's
//! input type, with errors that name the field, and encoded once into the step's frame
//! (`stampede_core::grpc::GrpcCall::frame`), or, when its fields hold references, compiled
//! into the call's encoding program (`program`). The controller and the agents only ever see
//! that frame or program: no descriptor leaves the CLI.

mod program;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::DescriptorPool;
use stampede_core::grpc::{self, GrpcCall};
use stampede_core::protocol::Transport;
use stampede_core::Scenario;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

/// Most files one reflection answer set may hold (a schema and its imports).
const MAX_REFLECTED_FILES: usize = 256;
/// How long the reflection service gets to answer.
const REFLECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the scenario has gRPC steps whose frames (or programs) are still to be made.
pub fn needs_resolution(s: &Scenario) -> bool {
    stampede_core::grpc::first_unresolved(s).is_some()
}

/// Resolves the schema (files or reflection) and encodes every gRPC step's message. Returns
/// whether the scenario changed. `base` is the scenario file's folder.
pub async fn resolve(s: &mut Scenario, base: &Path) -> Result<bool> {
    if !needs_resolution(s) {
        return Ok(false);
    }
    let pool = match s.grpc.as_ref() {
        Some(o) if o.reflection => reflect(s).await?,
        _ => compile(s, base)?,
    };
    encode_all(s, &pool)?;
    Ok(true)
}

/// [`resolve`] for a scenario whose schema is in files; with `reflection: true`, `Ok(false)`
/// and nothing encoded (the schema needs the target: `stampede validate` says so).
pub fn resolve_files(s: &mut Scenario, base: &Path) -> Result<bool> {
    if !needs_resolution(s) || s.grpc.as_ref().is_some_and(|o| o.reflection) {
        return Ok(false);
    }
    let pool = compile(s, base)?;
    encode_all(s, &pool)?;
    Ok(true)
}

/// Compiles `grpc.proto_files` (relative to `base`); imports are looked up beside each file
/// and in `grpc.import_paths`.
fn compile(s: &Scenario, base: &Path) -> Result<DescriptorPool> {
    let Some(o) = s.grpc.as_ref() else {
        bail!(
            "grpc: give the schema: grpc: {{ proto_files: [...] }} or grpc: {{ reflection: true }}"
        );
    };
    let files: Vec<PathBuf> = o.proto_files.iter().map(|f| base.join(f)).collect();
    let mut includes: Vec<PathBuf> = Vec::new();
    for dir in files
        .iter()
        .map(|f| f.parent().unwrap_or(Path::new(".")).to_path_buf())
        .chain(o.import_paths.iter().map(|p| base.join(p)))
    {
        if !includes.contains(&dir) {
            includes.push(dir);
        }
    }
    let mut compiler = protox::Compiler::new(&includes).context("grpc.proto_files")?;
    compiler.include_imports(true);
    for (f, path) in o.proto_files.iter().zip(&files) {
        if !path.is_file() {
            bail!("grpc.proto_files: cannot read `{}`", path.display());
        }
        compiler
            .open_file(path)
            .map_err(|e| anyhow!("grpc.proto_files: `{f}`: {e}"))?;
    }
    Ok(compiler.descriptor_pool())
}

/// Asks the target's reflection service for the files that define every called service.
async fn reflect(s: &Scenario) -> Result<DescriptorPool> {
    let target = s.target.as_ref().context("target: is required")?;
    let tls = target.transport() == Transport::Grpcs;
    let authority = target
        .socket_authority()
        .context("target: a gRPC target has host:port")?;
    let url = format!("{}://{authority}", if tls { "https" } else { "http" });
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .with_context(|| format!("target: `{url}`"))?
        .connect_timeout(REFLECTION_TIMEOUT)
        .timeout(REFLECTION_TIMEOUT);
    if tls {
        let opts = s.tls.clone().unwrap_or_default();
        if opts.insecure_skip_verify {
            bail!("grpc.reflection: over grpcs:// with tls.insecure_skip_verify, give grpc.proto_files instead (reflection verifies the certificate)");
        }
        let mut config = tonic::transport::ClientTlsConfig::new()
            .with_native_roots()
            .domain_name(opts.server_name.as_deref().unwrap_or(target.host()));
        if let Some(pem) = &opts.ca_pem {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(config).context("tls")?;
    }
    let channel = endpoint.connect().await.with_context(|| {
        format!("grpc.reflection: cannot connect to {target} to ask for the schema")
    })?;
    let mut client = ServerReflectionClient::new(channel);
    let services: BTreeSet<String> = s
        .step_lists()
        .into_iter()
        .flat_map(|(_, steps)| steps.iter())
        .filter_map(|st| st.grpc.as_ref()?.parts().map(|(svc, _)| svc.to_string()))
        .collect();
    let mut wanted: Vec<MessageRequest> = services
        .into_iter()
        .map(MessageRequest::FileContainingSymbol)
        .collect();
    let mut files: Vec<FileDescriptorProto> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    while let Some(req) = wanted.pop() {
        let asked = format!("{req:?}");
        for bytes in ask(&mut client, req).await? {
            let file = FileDescriptorProto::decode(bytes.as_slice()).context(
                "grpc.reflection: the target sent a file descriptor that does not decode",
            )?;
            if !seen.insert(file.name().to_string()) {
                continue;
            }
            // Imports the answer did not carry are asked for by name.
            for dep in &file.dependency {
                if !seen.contains(dep) {
                    wanted.push(MessageRequest::FileByFilename(dep.clone()));
                }
            }
            files.push(file);
            if files.len() > MAX_REFLECTED_FILES {
                bail!("grpc.reflection: more than {MAX_REFLECTED_FILES} files for {asked}");
            }
        }
    }
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(files)
        .map_err(|e| anyhow!("grpc.reflection: the target's schema does not build: {e}"))?;
    Ok(pool)
}

/// One reflection request; the file descriptors of its answer.
async fn ask(
    client: &mut ServerReflectionClient<tonic::transport::Channel>,
    req: MessageRequest,
) -> Result<Vec<Vec<u8>>> {
    let what = match &req {
        MessageRequest::FileContainingSymbol(s) => format!("service `{s}`"),
        MessageRequest::FileByFilename(f) => format!("file `{f}`"),
        other => format!("{other:?}"),
    };
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(req),
    };
    let mut answers = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .map_err(|e| {
            anyhow!(
                "grpc.reflection: the target's reflection service: {}",
                e.message()
            )
        })?
        .into_inner();
    let answer = answers
        .message()
        .await
        .map_err(|e| anyhow!("grpc.reflection: asking for {what}: {}", e.message()))?
        .context("grpc.reflection: the target closed the stream without an answer")?;
    match answer.message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => Ok(f.file_descriptor_proto),
        Some(MessageResponse::ErrorResponse(e)) => {
            bail!(
                "grpc.reflection: the target does not know {what}: {}",
                e.error_message
            )
        }
        _ => bail!("grpc.reflection: the target's answer for {what} holds no file"),
    }
}

/// Encodes every gRPC step's message with `pool` (or compiles its program), then checks the
/// scenario again.
fn encode_all(s: &mut Scenario, pool: &DescriptorPool) -> Result<()> {
    for (path, call) in grpc::calls_mut(s) {
        match encode(call, pool).map_err(|(field, why)| anyhow!("{path}.{field}: {why}"))? {
            Encoded::Frame(bytes) => {
                call.frame = Some(stampede_core::protocol::encode_base64(&bytes));
            }
            Encoded::Program(p) => call.program = Some(p),
        }
    }
    s.validate().map_err(|e| anyhow!("{e}"))
}

/// What the CLI makes of a call's message.
enum Encoded {
    /// A message without references: encoded once, framed.
    Frame(Vec<u8>),
    /// A message with references: the program agents render per call.
    Program(stampede_core::grpc::MessageProgram),
}

/// The call's frame or program, or `(field, reason)`.
fn encode(call: &GrpcCall, pool: &DescriptorPool) -> Result<Encoded, (String, String)> {
    let (service, method) = call.parts().ok_or_else(|| {
        (
            "method".to_string(),
            format!("`{}` is not package.Service/Method", call.method),
        )
    })?;
    let svc = pool.get_service_by_name(service).ok_or_else(|| {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        (
            "method".to_string(),
            format!(
                "no service `{service}` in the schema (it has: {})",
                known.join(", ")
            ),
        )
    })?;
    let m = svc.methods().find(|m| m.name() == method).ok_or_else(|| {
        let known: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
        (
            "method".to_string(),
            format!(
                "service `{service}` has no method `{method}` (it has: {})",
                known.join(", ")
            ),
        )
    })?;
    if m.is_client_streaming() || m.is_server_streaming() {
        return Err((
            "method".to_string(),
            format!(
                "`{}` is a streaming method: only unary calls are supported",
                call.method
            ),
        ));
    }
    let named = |(f, why): (String, String)| {
        let field = if f.is_empty() {
            "message".to_string()
        } else {
            format!("message.{f}")
        };
        (field, why)
    };
    if call.message.has_references() {
        return program::compile(&m.input(), &call.message)
            .map(Encoded::Program)
            .map_err(named);
    }
    let message = program::decode(&m.input(), call.message.literal_json(), "").map_err(named)?;
    grpc::frame(&message.encode_to_vec())
        .map(Encoded::Frame)
        .map_err(|why| ("message".to_string(), why))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
service Orders {
  rpc Get(GetRequest) returns (Order);
  rpc Watch(GetRequest) returns (stream Order);
}
message GetRequest { int64 id = 1; bool verbose = 2; Inner inner = 3; repeated uint32 codes = 4; }
message Inner { string note = 1; google.protobuf.Timestamp at = 2; }
message Order { int64 id = 1; }
"#;

    fn pool() -> (tempfile::TempDir, Scenario) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("protos")).unwrap();
        std::fs::write(dir.path().join("protos/shop.proto"), PROTO).unwrap();
        let s = Scenario::from_yaml(
            "name: g\ntarget: grpc://127.0.0.1:1\ngrpc: { proto_files: [protos/shop.proto] }\n\
             phases: [{ duration: 1s, arrival_rate: 1 }]\n\
             session:\n  - grpc: { method: shop.v1.Orders/Get, message: { id: 7, inner: { note: hi, at: \"2024-01-01T00:00:00Z\" } } }\n",
        )
        .unwrap();
        (dir, s)
    }

    #[test]
    fn proto_files_compile_and_messages_are_encoded_once() {
        let (dir, mut s) = pool();
        assert!(resolve_files(&mut s, dir.path()).unwrap());
        let frame = s.session[0]
            .grpc
            .as_ref()
            .unwrap()
            .frame_bytes()
            .unwrap()
            .unwrap();
        // id = 7 (field 1, varint), then inner (field 3, length-delimited).
        assert_eq!(&frame[5..7], [0x08, 7]);
        assert_eq!(frame[7], 0x1a);
        assert_eq!(
            u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize,
            frame.len() - 5
        );
        // Encoded once: a second resolution has nothing to do.
        assert!(!resolve_files(&mut s, dir.path()).unwrap());
    }

    #[test]
    fn bad_messages_and_methods_name_the_field() {
        let (dir, s) = pool();
        for (method, message, want) in [
            ("shop.v1.Orders/Get", r#"{"id": "x"}"#, "session[0].grpc.message.id: "),
            ("shop.v1.Orders/Get", r#"{"idd": 1}"#, "session[0].grpc.message: "),
            ("shop.v1.Orders/Get", r#"{"inner": {"note": 5}}"#, "session[0].grpc.message.inner.note: "),
            ("shop.v1.Orders/Get", r#"{"codes": [1, -2]}"#, "session[0].grpc.message.codes[1]: "),
            ("shop.v1.Orders/Get", r#"{"codes": [1, "${session.index}", -2]}"#, "session[0].grpc.message.codes[2]: "),
            ("shop.v1.Orders/Get", r#"{"codes": "${session.index}"}"#, "session[0].grpc.message.codes: is a repeated field: give a list"),
            ("shop.v1.Orders/Get", r#"{"inner": {"at": "${now.iso}"}}"#, "session[0].grpc.message.inner.at: templates fill scalar fields; `at` is a google.protobuf.Timestamp"),
            ("shop.v1.Orders/Get", r#"{"inner": {"nope": "${uuid()}"}}"#, "session[0].grpc.message.inner.nope: `shop.v1.Inner` has no field `nope`"),
            ("shop.v1.Orders/Get", r#"{"id": "${uuid()}", "inner": {"note": 5}}"#, "session[0].grpc.message.inner.note: "),
            ("shop.v1.Orders/Nope", "{}", "session[0].grpc.method: service `shop.v1.Orders` has no method `Nope` (it has: Get, Watch)"),
            ("shop.v1.Carts/Get", "{}", "session[0].grpc.method: no service `shop.v1.Carts`"),
            ("shop.v1.Orders/Watch", "{}", "streaming"),
        ] {
            let mut s = s.clone();
            let g = s.session[0].grpc.as_mut().unwrap();
            g.method = method.into();
            g.message = serde_json::from_str::<serde_json::Value>(message).unwrap().into();
            let e = resolve_files(&mut s, dir.path()).unwrap_err().to_string();
            assert!(e.contains(want), "{message}: {e}");
        }
        let mut missing = s.clone();
        missing.grpc.as_mut().unwrap().proto_files = vec!["nope.proto".into()];
        let e = resolve_files(&mut missing, dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("grpc.proto_files: cannot read"), "{e}");
        std::fs::write(
            dir.path().join("protos/bad.proto"),
            "syntax = \"proto3\";\nmessage {",
        )
        .unwrap();
        let mut bad = s.clone();
        bad.grpc.as_mut().unwrap().proto_files = vec!["protos/bad.proto".into()];
        let e = resolve_files(&mut bad, dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with("grpc.proto_files: `protos/bad.proto`: "),
            "{e}"
        );
    }

    #[test]
    fn reflection_waits_for_the_target() {
        let (dir, mut s) = pool();
        s.grpc = Some(grpc::GrpcOptions {
            reflection: true,
            ..Default::default()
        });
        assert!(!resolve_files(&mut s, dir.path()).unwrap());
        assert!(needs_resolution(&s));
    }
}
