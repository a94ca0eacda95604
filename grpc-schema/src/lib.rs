//! A scenario's gRPC steps checked and encoded against their schema, once, before the run is
//! submitted: each step's message (protobuf JSON) is checked against its method's input type,
//! with errors that name the field, and encoded into the step's frame
//! (`stampede_core::grpc::GrpcCall::frame`), or, when its fields hold references, compiled into
//! the call's descriptor-free encoding program (`program`). The JSON Pointers the step's
//! `extract` and `check` read are compiled against the method's reply type into field-number
//! paths (`reply`). Agents only ever see those frames, programs and paths: no descriptor
//! travels with a run.
//!
//! Two callers hold a schema. The CLI compiles `grpc.proto_files` from beside the scenario file
//! ([`compile_files`]) or asks the target's reflection service (its own module, the one with a
//! network client). The controller compiles a LoadTest's `.proto` files from the ConfigMap
//! `grpc.config_map` names ([`compile_sources`]), since a LoadTest has no files beside it.

#![warn(unreachable_pub, missing_docs)]

mod program;
mod reply;
mod sources;

use std::path::{Path, PathBuf};

use prost_reflect::prost::Message as _;
use prost_reflect::DescriptorPool;
use stampede_core::grpc::program::MessageProgram;
use stampede_core::grpc::{self, GrpcCall, GrpcOptions};
use stampede_core::{Scenario, ScenarioError};

pub use sources::{brace_depth, key_of, Sources, MAX_BRACE_DEPTH};

/// Why a scenario's gRPC steps could not be encoded; every message names the field.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The scenario has gRPC steps but no `grpc:` options saying where the schema is.
    #[error(
        "grpc: give the schema: grpc: {{ proto_files: [...] }} or grpc: {{ reflection: true }}"
    )]
    NoSchema,
    /// A `proto_files` entry is not a readable file.
    #[error("grpc.proto_files: cannot read `{0}`")]
    Unreadable(String),
    /// The folders to look up imports in are not usable.
    #[error("grpc.import_paths: {0}")]
    Includes(String),
    /// A `.proto` file (or one it imports) does not compile.
    #[error("grpc.proto_files: `{file}`: {why}")]
    Compile {
        /// The file as `grpc.proto_files` names it.
        file: String,
        /// The compiler's message.
        why: String,
    },
    /// A call's method or message does not fit the schema: `path` is the call
    /// (`session[0].grpc`), `field` the part of it (`method`, `message.inner.note`).
    #[error("{path}.{field}: {why}")]
    Call {
        /// The call's place in the scenario.
        path: String,
        /// The part of the call that does not fit.
        field: String,
        /// What the schema wants instead.
        why: String,
    },
    /// The scenario with its calls encoded does not validate.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// Compiles `grpc.proto_files`, relative to `base` (the scenario file's folder); imports are
/// looked up beside each file and in `grpc.import_paths`.
pub fn compile_files(options: &GrpcOptions, base: &Path) -> Result<DescriptorPool, SchemaError> {
    let files: Vec<PathBuf> = options.proto_files.iter().map(|f| base.join(f)).collect();
    let mut includes: Vec<PathBuf> = Vec::new();
    for dir in files
        .iter()
        .map(|f| f.parent().unwrap_or(Path::new(".")).to_path_buf())
        .chain(options.import_paths.iter().map(|p| base.join(p)))
    {
        if !includes.contains(&dir) {
            includes.push(dir);
        }
    }
    let mut compiler =
        protox::Compiler::new(&includes).map_err(|e| SchemaError::Includes(e.to_string()))?;
    compiler.include_imports(true);
    for (f, path) in options.proto_files.iter().zip(&files) {
        if !path.is_file() {
            return Err(SchemaError::Unreadable(path.display().to_string()));
        }
        compiler.open_file(path).map_err(|e| SchemaError::Compile {
            file: f.clone(),
            why: e.to_string(),
        })?;
    }
    Ok(compiler.descriptor_pool())
}

/// Compiles `grpc.proto_files` from `sources` (a ConfigMap's files): every file, named or
/// imported, is the source whose key is its base name ([`key_of`]), as
/// `kubectl create configmap NAME --from-file=DIR` names them. A source nesting braces past
/// [`MAX_BRACE_DEPTH`] is refused before it is parsed: these sources come from the cluster,
/// and the compiler runs in the controller.
pub fn compile_sources(
    options: &GrpcOptions,
    sources: Sources,
) -> Result<DescriptorPool, SchemaError> {
    if let Some(f) = options
        .proto_files
        .iter()
        .find(|f| !sources.contains(key_of(f)))
    {
        return Err(SchemaError::Unreadable(f.clone()));
    }
    if let Some(key) = sources.deeper_than(MAX_BRACE_DEPTH) {
        return Err(SchemaError::Compile {
            file: key.to_string(),
            why: format!("braces nest more than {MAX_BRACE_DEPTH} deep"),
        });
    }
    let mut compiler = protox::Compiler::with_file_resolver(sources);
    compiler.include_imports(true);
    for f in &options.proto_files {
        compiler.open_file(f).map_err(|e| SchemaError::Compile {
            file: f.clone(),
            why: e.to_string(),
        })?;
    }
    Ok(compiler.descriptor_pool())
}

/// Encodes every gRPC call of `s` with `pool` (a frame, or a program for a message holding
/// references), then checks the scenario again. Returns how many calls were encoded.
pub fn encode_all(s: &mut Scenario, pool: &DescriptorPool) -> Result<usize, SchemaError> {
    let mut n = 0;
    for grpc::CallMut { step, call, reads } in grpc::calls_mut(s) {
        let output = encode(call, pool).map_err(|(field, why)| SchemaError::Call {
            path: format!("{step}.grpc"),
            field,
            why,
        })?;
        call.reply.clear();
        for (pointer, field) in reads {
            let path = reply::compile(&output, &pointer).map_err(|why| SchemaError::Call {
                path: step.clone(),
                field: field.clone(),
                why: why.to_string(),
            })?;
            call.reply.insert(pointer, path);
        }
        n += 1;
    }
    s.validate()?;
    Ok(n)
}

/// What a call's message becomes.
enum Encoded {
    /// A message without references: encoded once, framed.
    Frame(Vec<u8>),
    /// A message with references: the program agents render per call.
    Program(MessageProgram),
}

/// Encodes `call` in place: its streaming kind, and its message's frame or program (each
/// listed message's for a client-streaming call); or `(field, reason)`. Returns the method's
/// reply type, which the step's extraction and checks read.
fn encode(
    call: &mut GrpcCall,
    pool: &DescriptorPool,
) -> Result<prost_reflect::MessageDescriptor, (String, String)> {
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
    let kind = grpc::Streaming::of(m.is_client_streaming(), m.is_server_streaming());
    let many = !call.messages.is_empty() || call.send.as_ref().is_some_and(|s| s.count() > 1);
    if many && !kind.is_some_and(grpc::Streaming::client_streams) {
        let field = if call.messages.is_empty() {
            "send.count"
        } else {
            "messages"
        };
        return Err((
            field.to_string(),
            format!(
                "`{}` takes one message (it is not client- or bidirectional-streaming): give message",
                call.method
            ),
        ));
    }
    call.streaming = kind;
    if call.messages.is_empty() {
        match encode_message(&m.input(), &call.message, "message")? {
            Encoded::Frame(bytes) => {
                call.frame = Some(stampede_core::protocol::encode_base64(&bytes));
            }
            Encoded::Program(p) => call.program = Some(p),
        }
        return Ok(m.output());
    }
    call.encoded = call
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            encode_message(&m.input(), message, &format!("messages[{i}]")).map(|e| match e {
                Encoded::Frame(bytes) => grpc::EncodedMessage {
                    frame: Some(stampede_core::protocol::encode_base64(&bytes)),
                    program: None,
                },
                Encoded::Program(p) => grpc::EncodedMessage {
                    frame: None,
                    program: Some(p),
                },
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(m.output())
}

/// One message's frame or program; errors name the field under `at` (`message`,
/// `messages[2]`).
fn encode_message(
    input: &prost_reflect::MessageDescriptor,
    message: &grpc::GrpcMessage,
    at: &str,
) -> Result<Encoded, (String, String)> {
    let named = |(f, why): (String, String)| {
        let field = if f.is_empty() {
            at.to_string()
        } else {
            format!("{at}.{f}")
        };
        (field, why)
    };
    if message.has_references() {
        return program::compile(input, message)
            .map(Encoded::Program)
            .map_err(named);
    }
    let decoded = program::decode(input, message.literal_json(), "").map_err(named)?;
    grpc::frame(&decoded.encode_to_vec())
        .map(Encoded::Frame)
        .map_err(|why| (at.to_string(), why.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const PROTO: &str = r#"
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "shop/v1/common.proto";
service Orders {
  rpc Get(GetRequest) returns (Order);
  rpc Watch(GetRequest) returns (stream Order);
  rpc Upload(stream GetRequest) returns (Order);
}
message GetRequest { int64 id = 1; bool verbose = 2; Inner inner = 3; repeated uint32 codes = 4; Page page = 5; }
message Inner { string note = 1; google.protobuf.Timestamp at = 2; }
message Order { int64 id = 1; }
"#;

    const COMMON: &str =
        "syntax = \"proto3\";\npackage shop.v1;\nmessage Page { uint32 size = 1; }\n";

    /// The schema in files: `protos/shop.proto`, importing `shop/v1/common.proto` from
    /// `protos/include`.
    fn files() -> (tempfile::TempDir, Scenario) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("protos/include/shop/v1")).unwrap();
        std::fs::write(dir.path().join("protos/shop.proto"), PROTO).unwrap();
        std::fs::write(
            dir.path().join("protos/include/shop/v1/common.proto"),
            COMMON,
        )
        .unwrap();
        let s = Scenario::from_yaml(
            "name: g\ntarget: grpc://127.0.0.1:1\n\
             grpc: { proto_files: [protos/shop.proto], import_paths: [protos/include] }\n\
             phases: [{ duration: 1s, arrival_rate: 1 }]\n\
             session:\n  - grpc: { method: shop.v1.Orders/Get, message: { id: 7, inner: { note: hi, at: \"2024-01-01T00:00:00Z\" } } }\n",
        )
        .unwrap();
        (dir, s)
    }

    fn frame(s: &Scenario) -> Vec<u8> {
        (match &s.session[0].kind {
            stampede_core::scenario::StepKind::Grpc(x) => x,
            k => panic!("not a grpc step: {k:?}"),
        })
        .frame_bytes()
        .unwrap()
        .unwrap()
    }

    #[test]
    fn files_compile_and_messages_are_framed() {
        let (dir, mut s) = files();
        let pool = compile_files(s.grpc.as_ref().unwrap(), dir.path()).unwrap();
        assert_eq!(encode_all(&mut s, &pool).unwrap(), 1);
        let frame = frame(&s);
        // id = 7 (field 1, varint), then inner (field 3, length-delimited).
        assert_eq!(&frame[5..7], [0x08, 7]);
        assert_eq!(frame[7], 0x1a);
        assert_eq!(
            u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize,
            frame.len() - 5
        );
    }

    /// A ConfigMap made with `kubectl create configmap --from-file` holds `shop.proto` and
    /// `common.proto`: the file named `protos/shop.proto` and the import
    /// `shop/v1/common.proto` are read by their base names, the well-known type comes with
    /// protox, and the frame is the one the files give.
    #[test]
    fn sources_are_read_by_base_name_and_encode_as_the_files_do() {
        let (dir, mut from_files) = files();
        let pool = compile_files(from_files.grpc.as_ref().unwrap(), dir.path()).unwrap();
        encode_all(&mut from_files, &pool).unwrap();
        let (_, mut s) = files();
        let sources = || {
            Sources::new(BTreeMap::from([
                ("shop.proto".to_string(), PROTO.to_string()),
                ("common.proto".to_string(), COMMON.to_string()),
            ]))
        };
        let pool = compile_sources(s.grpc.as_ref().unwrap(), sources()).unwrap();
        encode_all(&mut s, &pool).unwrap();
        assert_eq!(frame(&s), frame(&from_files));

        let options = |files: &[&str]| GrpcOptions {
            proto_files: files.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        };
        let e = compile_sources(&options(&["protos/orders.proto"]), sources()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "grpc.proto_files: cannot read `protos/orders.proto`"
        );
        let only_shop = Sources::new(BTreeMap::from([("shop.proto".into(), PROTO.into())]));
        let e = compile_sources(&options(&["shop.proto"]), only_shop).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("grpc.proto_files: `shop.proto`: ") && e.contains("shop/v1/common.proto"),
            "{e}"
        );
        assert_eq!(key_of("a/b/c.proto"), "c.proto");
        assert_eq!(key_of("c.proto"), "c.proto");
    }

    /// Braces are counted outside comments and strings; a source nesting them past the limit
    /// (an option value of a type that holds itself, nested to overflow the parser's stack)
    /// is refused before it is parsed.
    #[test]
    fn sources_nesting_braces_too_deep_are_refused_unparsed() {
        assert_eq!(brace_depth("message A { message B { } } message C {}"), 2);
        assert_eq!(
            brace_depth("// {{{{\n/* {{{ */ message A { string s = 1 [default = \"{{\\\"{\"]; }"),
            1
        );
        assert_eq!(brace_depth("option (x) = { a: '{' b { c: 1 } };"), 2);
        let deep = format!(
            "syntax = \"proto2\";\nimport \"google/protobuf/descriptor.proto\";\n\
             message R {{ optional R r = 1; }}\n\
             extend google.protobuf.MessageOptions {{ optional R rec = 50000; }}\n\
             message M {{ option (rec) = {{ {}{} }}; }}\n",
            "r { ".repeat(MAX_BRACE_DEPTH),
            "} ".repeat(MAX_BRACE_DEPTH)
        );
        let options = GrpcOptions {
            proto_files: vec!["deep.proto".into()],
            ..Default::default()
        };
        let e = compile_sources(
            &options,
            Sources::new(BTreeMap::from([("deep.proto".into(), deep)])),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("grpc.proto_files: `deep.proto`: braces nest more than {MAX_BRACE_DEPTH} deep")
        );
    }

    /// A streaming method's kind comes from the schema; a client stream's listed messages are
    /// each encoded (a frame, or a program when templated), and a bad one is named by index.
    #[test]
    fn streaming_calls_take_their_kind_and_each_message() {
        let (dir, s) = files();
        let pool = compile_files(s.grpc.as_ref().unwrap(), dir.path()).unwrap();
        let call = |s: &mut Scenario| match &mut s.session[0].kind {
            stampede_core::scenario::StepKind::Grpc(x) => x.clone(),
            k => panic!("not a grpc step: {k:?}"),
        };
        let with = |method: &str, messages: &[&str]| {
            let mut s = s.clone();
            if let stampede_core::scenario::StepKind::Grpc(g) = &mut s.session[0].kind {
                g.method = method.into();
                if !messages.is_empty() {
                    g.message = grpc::GrpcMessage::default();
                    g.messages = messages
                        .iter()
                        .map(|m| serde_json::from_str::<serde_json::Value>(m).unwrap().into())
                        .collect();
                }
            }
            s
        };
        let mut watch = with("shop.v1.Orders/Watch", &[]);
        encode_all(&mut watch, &pool).unwrap();
        let g = call(&mut watch);
        assert_eq!(g.streaming, Some(grpc::Streaming::Server));
        assert!(g.frame.is_some() && g.encoded.is_empty());

        let mut upload = with(
            "shop.v1.Orders/Upload",
            &[r#"{"id": 1}"#, r#"{"id": "${session.index}"}"#],
        );
        encode_all(&mut upload, &pool).unwrap();
        let g = call(&mut upload);
        assert_eq!(g.streaming, Some(grpc::Streaming::Client));
        assert!(g.frame.is_none());
        assert_eq!(g.encoded.len(), 2);
        assert_eq!(
            g.encoded[0]
                .frame
                .as_deref()
                .map(stampede_core::protocol::decode_base64)
                .unwrap()
                .unwrap(),
            [0, 0, 0, 0, 2, 8, 1]
        );
        assert!(g.encoded[1].program.is_some());

        let mut bad = with("shop.v1.Orders/Upload", &[r#"{"id": 1}"#, r#"{"id": "x"}"#]);
        let e = encode_all(&mut bad, &pool).unwrap_err().to_string();
        assert!(e.starts_with("session[0].grpc.messages[1].id: "), "{e}");
        let mut unary = with("shop.v1.Orders/Get", &[r#"{"id": 1}"#]);
        let e = encode_all(&mut unary, &pool).unwrap_err().to_string();
        assert!(
            e.starts_with("session[0].grpc.messages: `shop.v1.Orders/Get` takes one message"),
            "{e}"
        );
    }

    #[test]
    fn bad_messages_and_methods_name_the_field() {
        let (dir, s) = files();
        let pool = compile_files(s.grpc.as_ref().unwrap(), dir.path()).unwrap();
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
            ("shop.v1.Orders/Nope", "{}", "session[0].grpc.method: service `shop.v1.Orders` has no method `Nope` (it has: Get, Watch, Upload)"),
            ("shop.v1.Carts/Get", "{}", "session[0].grpc.method: no service `shop.v1.Carts`"),
            ("shop.v1.Orders/Get", r#"{"id": 1}"#, "session[0].grpc.send.count: `shop.v1.Orders/Get` takes one message"),
        ] {
            let mut s = s.clone();
            let g = match &mut s.session[0].kind { stampede_core::scenario::StepKind::Grpc(x) => x, k => panic!("not a grpc step: {k:?}") };
            if want.contains("send.count") {
                g.send = Some(grpc::SendPlan { count: Some(3), gap: None });
            }
            g.method = method.into();
            g.message = serde_json::from_str::<serde_json::Value>(message).unwrap().into();
            let e = encode_all(&mut s, &pool).unwrap_err().to_string();
            assert!(e.contains(want), "{message}: {e}");
        }
        let mut options = s.grpc.clone().unwrap();
        options.proto_files = vec!["nope.proto".into()];
        let e = compile_files(&options, dir.path()).unwrap_err().to_string();
        assert!(e.starts_with("grpc.proto_files: cannot read"), "{e}");
        std::fs::write(
            dir.path().join("protos/bad.proto"),
            "syntax = \"proto3\";\nmessage {",
        )
        .unwrap();
        options.proto_files = vec!["protos/bad.proto".into()];
        let e = compile_files(&options, dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with("grpc.proto_files: `protos/bad.proto`: "),
            "{e}"
        );
    }
}
