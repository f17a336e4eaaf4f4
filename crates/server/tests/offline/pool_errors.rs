//! What a client hears when a named drafting pool cannot be loaded: the pool's name, not
//! the server's file system.

use crate::common;

use axum::http::StatusCode;
use common::{chat_body, config, post, send, send_json};
use serde_json::{json, Value};
use specdec_server::{router, ServerConfig};

#[tokio::test]
async fn a_broken_pool_file_is_reported_by_pool_name_without_the_servers_paths() {
    // Before: the error sent to the client named the pool's file with its full path.
    let dir = std::env::temp_dir().join(format!("specdec-pool-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A folder where the pool's trie file should be: unreadable as a pool.
    std::fs::create_dir_all(dir.join("broken.trie")).unwrap();
    let server = common::start(&ServerConfig {
        pools: Some(dir.clone()),
        ..config()
    })
    .unwrap();
    let app = router(server.state.clone());
    let body = chat_body(json!({"speculation": {"pool": "broken"}}));
    let (s, text) = send(app.clone(), post("/v1/chat/completions", &body)).await;
    assert!(s.is_server_error(), "{s}: {text}");
    let folder = dir.to_string_lossy();
    assert!(!text.contains(folder.as_ref()), "{text}");
    assert!(!text.contains(".trie") && !text.contains("/tmp"), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "pool_unavailable", "{v}");
    assert_eq!(v["error"]["param"], "speculation", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("`broken`"),
        "{v}"
    );

    // The other pools are served.
    let body = chat_body(json!({"speculation": {"pool": "fine"}}));
    let (s, v) = send_json(app, post("/v1/chat/completions", &body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    std::mem::forget(server.engine);
    let _ = std::fs::remove_dir_all(&dir);
}
