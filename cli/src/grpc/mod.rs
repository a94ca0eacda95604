//! The schema of a scenario's gRPC steps, resolved once here before submission: `.proto` files
//! beside the scenario, or the target's server reflection service (`grpc.reflection.v1`), the
//! one network client of the schema. Checking and encoding the messages against it is
//! `stampede_grpc_schema`'s, shared with the controller (which compiles a LoadTest's files from
//! a ConfigMap).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::DescriptorPool;
use stampede_core::protocol::Transport;
use stampede_core::scenario::StepKind;
use stampede_core::Scenario;
use stampede_grpc_schema::SchemaError;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

/// Most files one reflection answer set may hold (a schema and its imports).
const MAX_REFLECTED_FILES: usize = 256;
/// Most bytes of file descriptors the reflection answers may hold in all, and in one answer:
/// a large real schema with its imports is a few MiB, and the count alone would let 256
/// answers of the decoder's limit each hold a gigabyte.
const MAX_REFLECTED_BYTES: usize = 16 << 20;
/// How long the reflection service gets to answer one request, its first message included:
/// a target that sends the response headers and then nothing must not hold the CLI forever.
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
        Some(o) if o.reflection => reflect(s, REFLECTION_TIMEOUT).await?,
        _ => compile(s, base)?,
    };
    stampede_grpc_schema::encode_all(s, &pool)?;
    Ok(true)
}

/// [`resolve`] for a scenario whose schema is in files; with `reflection: true`, `Ok(false)`
/// and nothing encoded (the schema needs the target: `stampede validate` says so).
pub fn resolve_files(s: &mut Scenario, base: &Path) -> Result<bool> {
    if !needs_resolution(s) || s.grpc.as_ref().is_some_and(|o| o.reflection) {
        return Ok(false);
    }
    let pool = compile(s, base)?;
    stampede_grpc_schema::encode_all(s, &pool)?;
    Ok(true)
}

/// Compiles `grpc.proto_files` from beside the scenario file.
fn compile(s: &Scenario, base: &Path) -> Result<DescriptorPool> {
    let options = s.grpc.as_ref().ok_or(SchemaError::NoSchema)?;
    Ok(stampede_grpc_schema::compile_files(options, base)?)
}

/// Asks the target's reflection service for the files that define every called service,
/// giving each request `deadline` to connect and to bring its answer.
async fn reflect(s: &Scenario, deadline: Duration) -> Result<DescriptorPool> {
    let target = s.target.as_ref().context("target: is required")?;
    let tls = target.transport() == Transport::Grpcs;
    let authority = target
        .socket_authority()
        .context("target: a gRPC target has host:port")?;
    let url = format!("{}://{authority}", if tls { "https" } else { "http" });
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .with_context(|| format!("target: `{url}`"))?
        .connect_timeout(deadline)
        .timeout(deadline);
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
        if let (Some(cert), Some(key)) = (&opts.client_cert_pem, &opts.client_key_pem) {
            // A target that requires mutual TLS asks the same of its reflection service.
            config = config.identity(tonic::transport::Identity::from_pem(cert, key.expose()));
        }
        endpoint = endpoint.tls_config(config).context("tls")?;
    }
    let channel = endpoint.connect().await.with_context(|| {
        format!("grpc.reflection: cannot connect to {target} to ask for the schema")
    })?;
    let mut client =
        ServerReflectionClient::new(channel).max_decoding_message_size(MAX_REFLECTED_BYTES);
    let services: BTreeSet<String> = s
        .step_lists()
        .into_iter()
        .flat_map(|(_, steps)| steps.iter())
        .filter_map(|st| match &st.kind {
            StepKind::Grpc(g) => g.parts().map(|(svc, _)| svc.to_string()),
            _ => None,
        })
        .collect();
    let mut wanted: Vec<MessageRequest> = services
        .into_iter()
        .map(MessageRequest::FileContainingSymbol)
        .collect();
    let mut schema = Reflected::new(MAX_REFLECTED_FILES, MAX_REFLECTED_BYTES);
    while let Some(req) = wanted.pop() {
        let asked = format!("{req:?}");
        let answer = ask(&mut client, req, deadline).await?;
        // Imports the answer did not carry are asked for by name.
        wanted.extend(
            schema
                .add(&asked, answer)?
                .into_iter()
                .map(MessageRequest::FileByFilename),
        );
    }
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(schema.files)
        .map_err(|e| anyhow!("grpc.reflection: the target's schema does not build: {e}"))?;
    Ok(pool)
}

/// The file descriptors the reflection answers brought so far, within a count and a size.
struct Reflected {
    files: Vec<FileDescriptorProto>,
    /// Names of the files received.
    seen: BTreeSet<String>,
    /// Names of the imports asked for.
    asked: BTreeSet<String>,
    bytes: usize,
    max_files: usize,
    max_bytes: usize,
}

impl Reflected {
    fn new(max_files: usize, max_bytes: usize) -> Self {
        Reflected {
            files: Vec::new(),
            seen: BTreeSet::new(),
            asked: BTreeSet::new(),
            bytes: 0,
            max_files,
            max_bytes,
        }
    }

    /// Adds the files of the answer to `asked`; returns the imports not yet seen or asked for.
    fn add(&mut self, asked: &str, answer: Vec<Vec<u8>>) -> Result<Vec<String>> {
        let mut imports = Vec::new();
        for bytes in answer {
            self.bytes = self.bytes.saturating_add(bytes.len());
            if self.bytes > self.max_bytes {
                bail!(
                    "grpc.reflection: the schema for {asked} is over {} bytes of file descriptors",
                    self.max_bytes
                );
            }
            let file = FileDescriptorProto::decode(bytes.as_slice()).context(
                "grpc.reflection: the target sent a file descriptor that does not decode",
            )?;
            if !self.seen.insert(file.name().to_string()) {
                continue;
            }
            for dep in &file.dependency {
                if !self.seen.contains(dep) && self.asked.insert(dep.clone()) {
                    imports.push(dep.clone());
                }
            }
            self.files.push(file);
            if self.files.len() > self.max_files {
                bail!(
                    "grpc.reflection: more than {} files for {asked}",
                    self.max_files
                );
            }
        }
        Ok(imports)
    }
}

/// One reflection request; the file descriptors of its answer, which must come within
/// `deadline`: the channel's own timeout ends with the response headers, and a stream's
/// first message can be awaited forever.
async fn ask(
    client: &mut ServerReflectionClient<tonic::transport::Channel>,
    req: MessageRequest,
    deadline: Duration,
) -> Result<Vec<Vec<u8>>> {
    let what = match &req {
        MessageRequest::FileContainingSymbol(s) => format!("service `{s}`"),
        MessageRequest::FileByFilename(f) => format!("file `{f}`"),
        other => format!("{other:?}"),
    };
    tokio::time::timeout(deadline, ask_once(client, req, &what))
        .await
        .map_err(|_| {
            anyhow!(
                "grpc.reflection: the target sent no answer for {what} within {} s",
                deadline.as_secs_f64()
            )
        })?
}

async fn ask_once(
    client: &mut ServerReflectionClient<tonic::transport::Channel>,
    req: MessageRequest,
    what: &str,
) -> Result<Vec<Vec<u8>>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"
syntax = "proto3";
package t.v1;
service Items { rpc Get(Item) returns (Item); }
message Item { int64 id = 1; string note = 2; }
"#;

    fn pool() -> (tempfile::TempDir, Scenario) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("protos")).unwrap();
        std::fs::write(dir.path().join("protos/items.proto"), PROTO).unwrap();
        let s = Scenario::from_yaml(
            "name: g\ntarget: grpc://127.0.0.1:1\ngrpc: { proto_files: [protos/items.proto] }\n\
             phases: [{ duration: 1s, arrival_rate: 1 }]\n\
             session:\n  - grpc: { method: t.v1.Items/Get, message: { id: 7, note: hi } }\n",
        )
        .unwrap();
        (dir, s)
    }

    #[test]
    fn proto_files_compile_and_messages_are_encoded_once() {
        let (dir, mut s) = pool();
        assert!(resolve_files(&mut s, dir.path()).unwrap());
        let frame = (match &s.session[0].kind {
            StepKind::Grpc(x) => x,
            k => panic!("not a grpc step: {k:?}"),
        })
        .frame_bytes()
        .unwrap()
        .unwrap();
        // id = 7 (field 1, varint), then note (field 2, length-delimited).
        assert_eq!(&frame[5..7], [0x08, 7]);
        assert_eq!(&frame[7..11], [0x12, 2, b'h', b'i']);
        assert_eq!(
            u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize,
            frame.len() - 5
        );
        // Encoded once: a second resolution has nothing to do.
        assert!(!resolve_files(&mut s, dir.path()).unwrap());
    }

    /// A reflection service that answers with headers and then never sends a message.
    struct Silent;

    type Never = std::pin::Pin<
        Box<
            dyn tokio_stream::Stream<
                    Item = Result<
                        tonic_reflection::pb::v1::ServerReflectionResponse,
                        tonic::Status,
                    >,
                > + Send,
        >,
    >;

    #[tonic::async_trait]
    impl tonic_reflection::pb::v1::server_reflection_server::ServerReflection for Silent {
        type ServerReflectionInfoStream = Never;

        async fn server_reflection_info(
            &self,
            _req: tonic::Request<tonic::Streaming<ServerReflectionRequest>>,
        ) -> Result<tonic::Response<Never>, tonic::Status> {
            Ok(tonic::Response::new(Box::pin(tokio_stream::pending())))
        }
    }

    #[tokio::test]
    async fn a_target_that_sends_headers_and_no_answer_is_given_up_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    tonic_reflection::pb::v1::server_reflection_server::ServerReflectionServer::new(
                        Silent,
                    ),
                )
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );
        let s = Scenario::from_yaml(&format!(
            "name: r\ntarget: grpc://{addr}\ngrpc: {{ reflection: true }}\n\
             phases: [ {{ duration: 1s, arrival_rate: 1 }} ]\n\
             session: [ {{ grpc: {{ method: t.v1.Items/Get, message: {{ id: 1 }} }} }} ]\n"
        ))
        .unwrap();
        let deadline = Duration::from_millis(300);
        let t = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(5), reflect(&s, deadline))
            .await
            .expect("the reflection gives up on its own")
            .unwrap_err();
        let waited = t.elapsed();
        assert!(
            e.to_string().contains("no answer for service `t.v1.Items`"),
            "{e:#}"
        );
        assert!(
            waited >= deadline && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }

    fn descriptor(name: &str, deps: &[&str], padding: usize) -> Vec<u8> {
        FileDescriptorProto {
            name: Some(name.into()),
            dependency: deps.iter().map(|d| d.to_string()).collect(),
            package: Some("p".repeat(padding)),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Files come once each with their imports asked for once; the answers are held to a
    /// count of files and to a size in bytes, however few files bring it.
    #[test]
    fn reflected_files_are_bounded_in_count_and_bytes() {
        let mut r = Reflected::new(3, 10_000);
        let imports = r
            .add(
                "a",
                vec![descriptor("a.proto", &["b.proto", "c.proto"], 10)],
            )
            .unwrap();
        assert_eq!(imports, ["b.proto", "c.proto"]);
        let again = r
            .add(
                "b",
                vec![
                    descriptor("b.proto", &["c.proto"], 10),
                    descriptor("a.proto", &[], 10),
                ],
            )
            .unwrap();
        assert!(again.is_empty(), "c.proto was asked for already: {again:?}");
        assert_eq!(r.files.len(), 2);
        let e = r
            .add("d", vec![descriptor("d.proto", &[], 20_000)])
            .unwrap_err();
        assert!(e.to_string().contains("over 10000 bytes"), "{e}");

        let mut r = Reflected::new(2, 1 << 20);
        let many: Vec<_> = (0..3)
            .map(|k| descriptor(&format!("{k}.proto"), &[], 1))
            .collect();
        let e = r.add("x", many).unwrap_err();
        assert!(e.to_string().contains("more than 2 files"), "{e}");
    }

    #[test]
    fn reflection_waits_for_the_target() {
        let (dir, mut s) = pool();
        s.grpc = Some(stampede_core::grpc::GrpcOptions {
            reflection: true,
            ..Default::default()
        });
        assert!(!resolve_files(&mut s, dir.path()).unwrap());
        assert!(needs_resolution(&s));
    }
}
