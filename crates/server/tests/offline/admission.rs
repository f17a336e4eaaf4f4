//! A burst is admitted up to `--max-concurrent` running plus `--max-queue` waiting.

use crate::common;

use axum::http::StatusCode;
use common::{config, post};
use serde_json::json;
use specdec_server::{router, ServerConfig};
use std::time::Duration;
use tower::ServiceExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_admits_max_concurrent_plus_max_queue() {
    // Before: a burst of 64 against `--max-queue 4` admitted 4, whatever `--max-concurrent`.
    let (max_concurrent, max_queue) = (2, 3);
    // Forwards that take time, so no stream ends while the burst is being admitted.
    let target = common::fake_target().with_forward_time(Duration::from_millis(5));
    let server = common::start_on(
        &ServerConfig {
            max_concurrent,
            max_queue,
            ..config()
        },
        target,
    )
    .unwrap();
    let app = router(server.state.clone());
    // Greedy counting streams far longer than the test runs.
    let body = json!({"model": "smol", "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
        "max_tokens": 4000, "temperature": 0, "stream": true})
    .to_string();
    let burst: Vec<_> = (0..16)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { app.oneshot(post("/v1/completions", &body)).await })
        })
        .collect();
    let mut admitted = Vec::new();
    let mut refused = 0;
    for t in burst {
        let res = t.await.unwrap().unwrap();
        match res.status() {
            StatusCode::OK => admitted.push(res),
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            s => panic!("{s}"),
        }
    }
    assert_eq!(admitted.len(), max_concurrent + max_queue);
    assert_eq!(refused, 16 - max_concurrent - max_queue);
    assert_eq!(server.state.backend.held(), max_concurrent + max_queue);
    // Leaving frees the places.
    drop(admitted);
    let start = std::time::Instant::now();
    while server.state.backend.held() > 0 {
        assert!(start.elapsed().as_secs() < 60, "places not freed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let res = app.oneshot(post("/v1/completions", &body)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}
