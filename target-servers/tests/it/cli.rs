//! `TargetCommand::run` in a child process: binding, serving, SIGTERM/SIGINT handling.
//!
//! The child is this test binary re-run with `STAMPEDE_TARGET_CHILD` set, executing only
//! [`child_main`], which runs the subcommand given in that variable and exits with its status.

use std::process::Stdio;

use clap::Parser;
use hyper::StatusCode;
use stampede_target_servers::TargetCommand;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::*;

const CHILD_ENV: &str = "STAMPEDE_TARGET_CHILD";

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    target: TargetCommand,
}

/// Only does something in the child process.
#[test]
fn child_main() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let cli = Cli::try_parse_from(std::iter::once("t").chain(args.split(' '))).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let code = match rt.block_on(cli.target.run()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// Starts the child and returns it with the address it logged as listening.
async fn spawn_child(args: &str) -> (Child, std::net::SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cli::child_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("child exited before listening");
        if line.contains("target listening") {
            let at = line.find("addr=").expect("no addr in log line") + 5;
            let addr = line[at..].split_whitespace().next().unwrap();
            break addr.parse().unwrap();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

/// Waits until the child has accepted a connection (an echo round trip succeeds).
async fn child_wait_open(_child: &Child, addr: std::net::SocketAddr) {
    let mut c = FramedClient::new(
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        stampede_target_servers::frame::Framing::Length,
    );
    assert_eq!(&c.roundtrip(b"x").await[..], b"x");
}

fn signal(child: &Child, sig: &str) {
    let pid = child.id().expect("child already reaped").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_gracefully() {
    bounded(async {
        let (mut child, addr) = spawn_child("http --listen 127.0.0.1:0 --delay-ms 1").await;
        let mut c = h1(addr).await;
        assert_eq!(get(&mut c, "/data").await.0, StatusCode::OK);
        drop(c);
        signal(&child, "-TERM");
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_signal_forces_exit() {
    bounded(async {
        let (mut child, addr) = spawn_child(
            "echo-tcp --listen 127.0.0.1:0 --shutdown-grace 1h --metrics-listen 127.0.0.1:0",
        )
        .await;
        // A connection inside a frame keeps the server draining after the first signal.
        let mut stuck = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stuck, &[0, 0])
            .await
            .unwrap();
        child_wait_open(&child, addr).await;
        signal(&child, "-INT");
        // The first signal was handled once the listener is closed.
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
        signal(&child, "-INT");
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(130), "{status:?}");
        drop(stuck);
    })
    .await;
}

/// `--reuse-port`: two target processes serve the same ip:port; a third without the flag
/// cannot bind it and exits with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_port_shares_one_address_between_processes() {
    bounded(async {
        let (mut a, addr) = spawn_child("http --listen 127.0.0.1:0 --reuse-port").await;
        let (mut b, addr_b) = spawn_child(&format!("http --listen {addr} --reuse-port")).await;
        assert_eq!(addr_b, addr);

        // The kernel spreads connections over both listeners by a hash of the 4-tuple: with
        // both processes serving, every connection is answered.
        for _ in 0..32 {
            let mut c = h1(addr).await;
            assert_eq!(get(&mut c, "/").await.0, StatusCode::OK);
        }
        // Stop the first: the second alone keeps answering on the same address.
        signal(&a, "-TERM");
        assert_eq!(a.wait().await.unwrap().code(), Some(0));
        for _ in 0..32 {
            let mut c = h1(addr).await;
            assert_eq!(get(&mut c, "/").await.0, StatusCode::OK);
        }

        // Without the flag the address is taken.
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "cli::child_main", "--nocapture"])
            .env(CHILD_ENV, format!("http --listen {addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let status = c.wait().await.unwrap();
        assert_eq!(status.code(), Some(1), "{status:?}");
        let mut err = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut c.stderr.take().unwrap(), &mut err)
            .await
            .unwrap();
        assert!(err.contains("cannot bind"), "{err}");

        signal(&b, "-TERM");
        assert_eq!(b.wait().await.unwrap().code(), Some(0));
    })
    .await;
}
