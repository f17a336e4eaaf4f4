//! One server (a fake target, an engine thread) per test binary, and request helpers.
//!
//! The server's tests need a model for its vocabulary, tokenizer and template only: the
//! tiny synthetic model's file gives those (no weights are read), and a [`FakeTarget`] of
//! its vocabulary computes logits from the token path. Tests of what loading a file does
//! (the draft model, config errors) call `Server::load` on the tiny model itself.

#![allow(dead_code)] // each test binary uses part of this

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use specdec_engine::ModelMeta;
use specdec_runtime::FakeTarget;
use specdec_server::{router, AppState, Served, Server, ServerConfig};
use tower::ServiceExt;

pub fn config() -> ServerConfig {
    ServerConfig {
        model_id: Some("smol".into()),
        max_concurrent: 4,
        max_queue: 16,
        timeout: Duration::from_secs(120),
        prefix_cache_bytes: 64 << 20,
        ..ServerConfig::new(specdec_testkit::tiny_model_path().to_path_buf())
    }
}

/// The tiny model's configuration, tokenizer and template (no weights).
pub fn meta() -> ModelMeta {
    ModelMeta::open(specdec_testkit::tiny_model_path()).expect("tiny model's metadata")
}

/// A fake target of the tiny model's vocabulary and context.
pub fn fake_target() -> FakeTarget {
    let config = meta().config;
    FakeTarget::new(config.vocab, config.context_length)
}

/// A server of `config` over `target`.
pub fn start_on(
    config: &ServerConfig,
    target: FakeTarget,
) -> Result<Server, specdec_server::ServerError> {
    let served = Served {
        target: Arc::new(target),
        meta: meta(),
        draft_model: None,
    };
    Server::start(config, served)
}

/// A server of `config` over the fake target.
pub fn start(config: &ServerConfig) -> Result<Server, specdec_server::ServerError> {
    start_on(config, fake_target())
}

/// The shared server's state; its engine thread lives as long as the test binary.
pub fn state() -> Arc<AppState> {
    static S: OnceLock<Arc<AppState>> = OnceLock::new();
    S.get_or_init(|| {
        let server = start(&config()).expect("server starts");
        std::mem::forget(server.engine);
        server.state
    })
    .clone()
}

pub fn app() -> Router {
    router(state())
}

pub fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// Sends `req` and returns the status and the whole body.
pub async fn send(app: Router, req: Request<Body>) -> (StatusCode, String) {
    let res = app.oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

pub async fn send_json(app: Router, req: Request<Body>) -> (StatusCode, Value) {
    let (status, body) = send(app, req).await;
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v)
}

/// A small greedy chat request with `extra` fields merged in.
pub fn chat_body(extra: Value) -> String {
    let mut b = json!({"model": "smol", "messages": [{"role": "user", "content": "Name three colors."}],
        "max_tokens": 12, "temperature": 0});
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b.to_string()
}
