//! Request ids. Every request gets one: the client's (or gateway's) `X-Request-Id` when it
//! is a sane one, else a fresh one. Every log line about the request carries it (a tracing
//! span, entered on the engine thread too), and the response echoes it in `X-Request-Id`,
//! so one id follows a request through a router, the replica's logs and the client's.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header read and echoed.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The longest id taken from a request; longer (or odd) ones are replaced.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The request's span, for the handlers to hand to the engine thread with the job.
#[derive(Clone, Debug)]
pub struct RequestSpan(pub tracing::Span);

impl RequestSpan {
    /// The span in `req`'s extensions (none outside the router, as in unit tests).
    pub fn of(req: &Request) -> tracing::Span {
        req.extensions()
            .get::<RequestSpan>()
            .map(|s| s.0.clone())
            .unwrap_or_else(tracing::Span::none)
    }
}

/// The middleware: names the request, runs it inside its span, echoes the id.
pub async fn layer(mut req: Request, next: Next) -> Response {
    let id = given(req.headers()).unwrap_or_else(fresh);
    let span = tracing::info_span!("request", id = %id);
    req.extensions_mut().insert(RequestSpan(span.clone()));
    let mut res = next.run(req).instrument(span).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    res
}

/// The request's own id: one header of 1 to [`MAX_REQUEST_ID_BYTES`] of
/// `A-Z a-z 0-9 - _ . : / + =` (what ids and base64 use; nothing that could forge a log
/// line or a header).
fn given(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(REQUEST_ID_HEADER).iter();
    let (v, None) = (values.next()?, values.next()) else {
        return None;
    };
    let ok = |b: &u8| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b);
    let b = v.as_bytes();
    (!b.is_empty() && b.len() <= MAX_REQUEST_ID_BYTES && b.iter().all(ok))
        .then(|| String::from_utf8_lossy(b).into_owned())
}

/// A fresh id: unique in this process, and across replicas (the process's start time in
/// nanoseconds and its id are in it).
fn fresh() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        format!("{:x}{:x}", nanos, std::process::id())
    });
    format!("req-{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(REQUEST_ID_HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_sane_id_is_kept_and_anything_else_replaced() {
        assert_eq!(
            given(&headers(&["abc-123_x.y:z/+="])).as_deref(),
            Some("abc-123_x.y:z/+=")
        );
        for bad in ["", "has space", "quote\"", &"x".repeat(129)] {
            assert_eq!(given(&headers(&[bad])), None, "{bad:?}");
        }
        assert_eq!(
            given(&headers(&["a", "b"])),
            None,
            "two ids: neither is trusted"
        );
        assert_ne!(fresh(), fresh());
    }
}
