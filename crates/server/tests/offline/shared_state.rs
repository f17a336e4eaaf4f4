//! `--shared-state` between two servers of one model, through a real `redis-server`: a
//! request answered by one replica teaches the other, whose repeat drafts from it and is
//! the same text; a Redis that is down fails no request.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{json, Value};
use specdec_server::{router, AppState};
use specdec_testkit::RedisServer;

use crate::common::{chat_body, config, get, post, send, send_json};

fn replica(url: &str) -> std::sync::Arc<AppState> {
    let cfg = specdec_server::ServerConfig {
        shared_state: Some(url.to_string()),
        // The repeat must draft from the other replica's answer, not reuse a cache.
        prefix_cache_bytes: 0,
        ..config()
    };
    let server = crate::common::start(&cfg).expect("server starts");
    std::mem::forget(server.engine);
    server.state
}

fn body() -> String {
    chat_body(json!({
        "messages": [{"role": "user", "content": "Write the numbers one to twenty in words."}],
        "max_tokens": 48,
        "speculation": {"method": "history"}
    }))
}

/// The value of the metric line starting with `name{` (0 when absent).
async fn metric(state: &std::sync::Arc<AppState>, name: &str) -> f64 {
    let (_, text) = send(router(state.clone()), get("/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_on_another_replica_drafts_from_the_first_answer() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    let (status, first) = send_json(router(a.clone()), post("/v1/chat/completions", &body())).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        first["speculation"]["accepted_tokens"], 0,
        "nothing to draft from yet"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&b, "specdec:shared_state_folded_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "replica b folds a's lesson within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, repeat) =
        send_json(router(b.clone()), post("/v1/chat/completions", &body())).await;
    assert_eq!(status, StatusCode::OK, "{repeat}");
    let text = |v: &Value| v["choices"][0]["message"]["content"].clone();
    assert_eq!(text(&repeat), text(&first), "strict: the same answer");
    let accepted = repeat["speculation"]["accepted_tokens"].as_u64().unwrap();
    let produced = repeat["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(
        accepted * 2 >= produced,
        "the repeat drafted most of its answer from a's: {accepted} of {produced}"
    );
    assert_eq!(
        metric(&a, "specdec:shared_state_published_total").await,
        1.0
    );
    assert_eq!(metric(&b, "specdec:shared_state_connected").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_is_down_fails_no_request() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let url = redis.url();
    redis.kill();
    let a = replica(&url);
    for _ in 0..2 {
        let (status, out) =
            send_json(router(a.clone()), post("/v1/chat/completions", &body())).await;
        assert_eq!(status, StatusCode::OK, "{out}");
    }
    // The second answer drafted from the first, locally.
    assert_eq!(metric(&a, "specdec:shared_state_connected").await, 0.0);
    // The engine hands a lesson to the publisher after the answer is sent, and the
    // publisher counts it held once its connection attempt fails: wait for both.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&a, "specdec:shared_state_held").await < 1.0 {
        assert!(Instant::now() < deadline, "held for later within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(&a, "specdec:shared_state_published_total").await < 2.0 {
        assert!(
            Instant::now() < deadline,
            "what was held is published once Redis is back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
