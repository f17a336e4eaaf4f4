//! A request past the server's timeout ends with 504 and frees its slot; connections
//! that send slowly, half a request or nothing are closed.

use crate::common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{config, post, send_json};
use serde_json::json;
use specdec_server::{router, serve_with, ConnectionLimits, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn a_request_past_the_timeout_is_a_504() {
    // A forward outlasts the deadline.
    let target = common::fake_target().with_forward_time(Duration::from_millis(5));
    let server = common::start_on(
        &ServerConfig {
            timeout: Duration::from_millis(1),
            ..config()
        },
        target,
    )
    .unwrap();
    let app = router(server.state.clone());
    let body = json!({"model": "smol", "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 2000});
    let (s, v) = send_json(app.clone(), post("/v1/chat/completions", &body.to_string())).await;
    assert_eq!(s, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(v["error"]["code"], "timeout");
    let metrics = server.state.metrics.render();
    assert!(
        metrics.contains("finished_reason=\"timeout\"} 1"),
        "{metrics}"
    );
}

/// A server on a free port with short connection limits, and its shutdown trigger.
async fn serve_short(
    header_read: Duration,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    serve_limited(ConnectionLimits {
        header_read,
        body_read: Duration::from_millis(500),
        max_connections: 8,
        ..ConnectionLimits::default()
    })
    .await
}

/// A server on a free port with `limits`, and its shutdown trigger.
async fn serve_limited(
    limits: ConnectionLimits,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let server = common::start(&config()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(
        listener,
        server,
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(30),
        limits,
    ));
    (addr, stop, task)
}

/// Reads until the server closes the connection (or `limit` passes: a panic).
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(limit, stream.read_to_end(&mut out))
        .await
        .expect("the server closed the connection in time")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_and_idle_connections_are_closed() {
    // Before: none of 800 slow or half-sent connections was closed in 45 s.
    let (addr, stop, task) = serve_short(Duration::from_millis(500)).await;
    let limit = Duration::from_secs(5);

    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut half_head = TcpStream::connect(addr).await.unwrap();
    half_head
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-")
        .await
        .unwrap();
    let mut half_body = TcpStream::connect(addr).await.unwrap();
    half_body
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\"",
        )
        .await
        .unwrap();
    read_to_close(&mut idle, limit).await;
    read_to_close(&mut half_head, limit).await;
    let reply = read_to_close(&mut half_body, limit).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("request_timeout"), "{reply}");

    // A whole request on a kept-alive connection is still served.
    let mut ok = TcpStream::connect(addr).await.unwrap();
    ok.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_close(&mut ok, limit).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_idle_sockets_do_not_hold_up_other_clients() {
    // Before: the connection cap was global, so 600 half-open sockets from one client made
    // every request wait 9-14 s (here: until the header timeout, a minute).
    let (addr, stop, task) = serve_limited(ConnectionLimits {
        header_read: Duration::from_secs(60),
        body_read: Duration::from_secs(60),
        max_connections: 8,
        max_connections_per_client: 3,
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // Those past the client's limit are answered 429 and closed at once.
    let reply = read_to_close(idle.last_mut().unwrap(), Duration::from_secs(10)).await;
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 429"),
        "{reply}"
    );
    if !reply.is_empty() {
        assert!(reply.contains("too_many_connections"), "{reply}");
    }

    // Another client (another loopback address) is served while they wait.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    other
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_close(&mut other, Duration::from_secs(10)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_not_held_up_by_a_half_sent_request() {
    // Before: a half-sent request kept Ctrl-C from ending the server.
    let (addr, stop, task) = serve_short(Duration::from_secs(600)).await;
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
    read_to_close(&mut idle, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_stream_nobody_reads_is_cancelled_and_frees_its_slot() {
    // Before: events piled up without bound and the request held its slot to the end.
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let server = common::start(&config()).unwrap();
    let app = router(server.state.clone());
    let body = json!({"model": "smol", "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
        "max_tokens": 4000, "temperature": 0, "stream": true});
    let res = app
        .oneshot(post("/v1/completions", &body.to_string()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // Nobody reads: the engine fills the stream's buffer, then gives the slot back.
    let start = std::time::Instant::now();
    while server.state.backend.held() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "slot still held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("\"finish_reason\":\"cancelled\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}
