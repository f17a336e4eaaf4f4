//! Settings the server refuses at start-up, and what `/metrics` does with odd names.

use crate::common;

use common::config;
use specdec_server::{metrics::Metrics, Server, ServerConfig, ServerError};

#[test]
fn an_empty_api_key_is_refused_at_start_up() {
    for key in ["", "  "] {
        let r = Server::load(&ServerConfig {
            api_key: Some(key.into()),
            ..config()
        });
        assert!(matches!(r, Err(ServerError::Config(_))), "{key:?}");
    }
}

#[test]
fn a_served_model_name_with_a_newline_is_refused() {
    for id in ["smol\nvllm:fake_total 1", "", &"m".repeat(300)] {
        let r = Server::load(&ServerConfig {
            model_id: Some(id.into()),
            ..config()
        });
        assert!(matches!(r, Err(ServerError::Config(_))), "{id:?}");
    }
}

#[test]
fn metrics_label_values_cannot_inject_lines() {
    let m = Metrics::new("a\"b\\c\nvllm:fake_total 1");
    let text = m.render();
    assert!(!text.lines().any(|l| l.starts_with("vllm:fake")), "{text}");
    assert!(
        text.contains(r#"model_name="a\"b\\c\nvllm:fake_total 1""#),
        "{text}"
    );
}

#[test]
fn a_default_model_method_without_a_draft_model_is_refused_at_start_up() {
    let r = Server::load(&ServerConfig {
        default_method: specdec_engine::DraftMethod::Model,
        ..config()
    });
    match r {
        Err(ServerError::Config(m)) => assert!(m.contains("--draft-model"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started without a draft model"),
    }
}
