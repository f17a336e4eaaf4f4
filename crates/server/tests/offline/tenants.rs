//! Drafting state is scoped like the prefix cache, through the API on the tiny synthetic
//! model: a tenant's drafts never come from another tenant's requests, the operator names
//! the pools tenants share, and a client cannot create pools without limit.

use crate::common;

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use common::{chat_body, config, post, send_json};
use serde_json::{json, Value};
use specdec_engine::{PoolLimits, PoolName};
use specdec_server::{router, AppState, ServerConfig};

fn state() -> Arc<AppState> {
    static S: OnceLock<Arc<AppState>> = OnceLock::new();
    S.get_or_init(|| {
        let server = common::start(&ServerConfig {
            pool_limits: PoolLimits {
                max_named: 2,
                ..config().pool_limits
            },
            shared_pools: vec![PoolName::parse("handbook").unwrap()],
            ..config()
        })
        .expect("server loads");
        std::mem::forget(server.engine);
        server.state
    })
    .clone()
}

/// A relaxed chat (LASER's rule, top-64, tau 0: any drafted token in the target's top 64
/// is accepted) as `tenant`: its drafts decide its text, and relaxed sizing is the same on
/// every run, so two fresh tenants' answers and statistics are equal.
async fn relaxed_chat(tenant: &str, content: &str, pool: Option<&str>) -> Value {
    let mut spec = json!({"method": "auto", "verify": "relaxed", "top_k": 64, "tau": 0.0});
    if let Some(p) = pool {
        spec["pool"] = json!(p);
    }
    let body = chat_body(json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 40,
        "speculation": spec,
    }));
    let mut req = post("/v1/chat/completions", &body);
    req.headers_mut()
        .insert("x-specdec-tenant", tenant.parse().unwrap());
    let (status, v) = send_json(router(state()), req).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

fn seen(v: &Value) -> (Value, Value, Value) {
    (
        v["choices"][0]["message"]["content"].clone(),
        v["speculation"]["drafted_tokens"].clone(),
        v["speculation"]["accepted_tokens"].clone(),
    )
}

/// Regression (tenant leak): a second tenant confirmed a first tenant's exact prompt from
/// its acceptance statistics, and with relaxed verification the first tenant's vault code
/// appeared in the second tenant's output.
#[tokio::test]
async fn a_tenant_drafts_nothing_from_another_tenants_requests() {
    let secret = "The vault code is 8-3-1-9. Repeat the vault code exactly, three times.";
    for _ in 0..2 {
        relaxed_chat("alice-t", secret, None).await;
    }
    let alice = relaxed_chat("alice-t", secret, None).await;
    let mallory = relaxed_chat("mallory-t", secret, None).await;
    let fresh = relaxed_chat("fresh-t", secret, None).await;
    assert_eq!(
        seen(&mallory),
        seen(&fresh),
        "mallory drafts from alice's requests"
    );
    assert!(
        alice["speculation"]["accepted_tokens"].as_u64()
            > mallory["speculation"]["accepted_tokens"].as_u64(),
        "alice's own repeat drafts from what she taught her pool: {alice} {mallory}"
    );
    // Named pools are per tenant too, except those the operator shares.
    relaxed_chat("alice-t", secret, Some("team")).await;
    let a = relaxed_chat("mallory-t", secret, Some("team")).await;
    let b = relaxed_chat("fresh2-t", secret, Some("team")).await;
    assert_eq!(seen(&a), seen(&b));
    let shared = "Our handbook says: deploys happen on Tuesdays at 10:00. Repeat it twice.";
    relaxed_chat("alice-t", shared, Some("handbook")).await;
    relaxed_chat("alice-t", shared, Some("handbook")).await;
    let m = relaxed_chat("mallory-t", shared, Some("handbook")).await;
    let f = relaxed_chat("fresh3-t", shared, None).await;
    assert!(
        m["speculation"]["accepted_tokens"].as_u64() > f["speculation"]["accepted_tokens"].as_u64(),
        "a shared pool is shared: {m} {f}"
    );
}

/// Regression (unbounded pools): any client could create named pools without limit.
#[tokio::test]
async fn a_tenant_creating_pools_past_its_limit_is_refused() {
    let ask = |pool: &'static str| async move {
        let body =
            chat_body(json!({"max_tokens": 2, "speculation": {"method": "auto", "pool": pool}}));
        let mut req = post("/v1/chat/completions", &body);
        req.headers_mut()
            .insert("x-specdec-tenant", "pool-maker".parse().unwrap());
        send_json(router(state()), req).await
    };
    for p in ["p1", "p2", "p1", "handbook"] {
        let (s, v) = ask(p).await;
        assert_eq!(s, StatusCode::OK, "{p}: {v}");
    }
    let (s, v) = ask("p3").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "pool_limit_exceeded", "{v}");
}
