//! The login target over real loopback sockets.

use bytes::BytesMut;
use stampede_target_servers::frame::Framing;
use stampede_target_servers::login::{
    self, Client, DenyReason, LoginAction, LoginConfig, LoginRequest, User, UserTable,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::*;

fn granted(role: &str) -> LoginAction {
    LoginAction::Granted { role: role.into() }
}

fn denied(reason: DenyReason) -> LoginAction {
    LoginAction::Denied { reason }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_each_outcome() {
    bounded(async {
        let (_server, addr, running) = start_login(LoginConfig::default()).await;
        let mut c = Client::connect(addr).await.unwrap();
        assert_eq!(
            c.login("alice", "wonderland").await.unwrap(),
            granted("admin")
        );
        assert_eq!(c.login("bob", "builder").await.unwrap(), granted("user"));
        assert_eq!(
            c.login("alice", "nope").await.unwrap(),
            denied(DenyReason::WrongPassword)
        );
        assert_eq!(
            c.login("mallory", "mallory").await.unwrap(),
            denied(DenyReason::AccountLocked)
        );
        assert_eq!(
            c.login("zed", "x").await.unwrap(),
            denied(DenyReason::UnknownUser)
        );
        assert_eq!(
            c.login("user123", "pass123").await.unwrap(),
            granted("user")
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_from_a_table() {
    bounded(async {
        let users = UserTable::from_users([User {
            username: "ops".into(),
            password: "s3cret".into(),
            role: "operator".into(),
            locked: false,
        }]);
        let (_server, addr, running) = start_login(LoginConfig {
            users,
            ..LoginConfig::default()
        })
        .await;
        let mut c = Client::connect(addr).await.unwrap();
        assert_eq!(c.login("ops", "s3cret").await.unwrap(), granted("operator"));
        assert_eq!(
            c.login("alice", "wonderland").await.unwrap(),
            denied(DenyReason::UnknownUser)
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_many_requests_each() {
    bounded(async {
        let (server, addr, running) = start_login(LoginConfig::default()).await;
        let (maddr, metrics) = {
            let s = server.clone();
            start_metrics(move || s.metrics_text()).await
        };
        let clients = 8u64;
        let per_client = 100u64;
        let mut tasks = Vec::new();
        for c in 0..clients {
            tasks.push(tokio::spawn(async move {
                let mut client = Client::connect(addr).await.unwrap();
                for i in 0..per_client {
                    let n = c * per_client + i;
                    let pass = if n.is_multiple_of(2) {
                        format!("pass{n}")
                    } else {
                        "wrong".into()
                    };
                    let want = if n.is_multiple_of(2) {
                        granted("user")
                    } else {
                        denied(DenyReason::WrongPassword)
                    };
                    assert_eq!(
                        client.login(&format!("user{n}"), &pass).await.unwrap(),
                        want
                    );
                }
                client
            }));
        }
        let mut open = Vec::new();
        for t in tasks {
            open.push(t.await.unwrap());
        }
        let m = scrape(maddr).await;
        let total = clients * per_client;
        assert_eq!(
            m.get("stampede_target_login_connections_open", &[]),
            Some(clients as f64)
        );
        assert_eq!(
            m.get("stampede_target_login_frames_total", &[]),
            Some(total as f64)
        );
        assert_eq!(
            m.get("stampede_target_login_request_duration_seconds_count", &[]),
            Some(total as f64)
        );
        assert_eq!(
            m.get(
                "stampede_target_login_logins_total",
                &[("result", "granted")]
            ),
            Some((total / 2) as f64)
        );
        assert_eq!(
            m.get(
                "stampede_target_login_logins_total",
                &[("result", "wrong_password")]
            ),
            Some((total / 2) as f64)
        );
        drop(open);
        server.wait_until(|s| s.connections_open == 0).await;
        let m = scrape(maddr).await;
        assert_eq!(
            m.get("stampede_target_login_connections_open", &[]),
            Some(0.0)
        );
        assert_eq!(
            m.get("stampede_target_login_connections_total", &[]),
            Some(clients as f64)
        );
        assert_eq!(server.stats().errors_total, 0);
        running.stop().await;
        metrics.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_per_request() {
    bounded(async {
        let (server, addr, running) = start_login(LoginConfig::default()).await;
        for _ in 0..30 {
            let mut c = Client::connect(addr).await.unwrap();
            assert_eq!(c.login("bob", "builder").await.unwrap(), granted("user"));
        }
        server.wait_until(|s| s.connections_open == 0).await;
        let s = server.stats();
        assert_eq!(
            (s.connections_total, s.frames_total, s.errors_total),
            (30, 30, 0)
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    bounded(async {
        let (_server, addr, running) = start_login(LoginConfig::default()).await;
        let mut wire = BytesMut::new();
        for n in 0..50 {
            let req = LoginRequest {
                username: format!("user{n}"),
                password: format!("pass{}", n % 3),
            };
            login::encode_message(&req, &mut wire).unwrap();
        }
        let mut c = FramedClient::new(TcpStream::connect(addr).await.unwrap(), Framing::Length);
        c.stream.write_all(&wire).await.unwrap();
        for n in 0..50 {
            let frame = c.recv().await.unwrap();
            let got = login::decode_action(&frame).unwrap();
            let want = if n % 3 == n {
                granted("user")
            } else {
                denied(DenyReason::WrongPassword)
            };
            assert_eq!(got, want, "answer {n}");
        }
        running.stop().await;
    })
    .await;
}
