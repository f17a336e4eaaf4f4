//! A request past the server's timeout ends with 504 and frees its slot.

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{config, post, send_json};
use serde_json::json;
use specdec_server::{router, Server, ServerConfig};

#[tokio::test]
async fn a_request_past_the_timeout_is_a_504() {
    let server = Server::load(&ServerConfig {
        timeout: Duration::from_millis(1),
        ..config()
    })
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
