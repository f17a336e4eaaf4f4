//! Connections per client: one peer address may hold only so many of the server's places
//! (the global cap alone let one client's idle sockets take them all).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::response::IntoResponse;

use crate::error::ApiError;

/// Connections open per peer address, each at most `limit`.
pub(crate) struct PerClient {
    limit: usize,
    open: Mutex<HashMap<IpAddr, Client>>,
}

#[derive(Default)]
struct Client {
    open: usize,
    /// Whether the log has said this client is over its limit (said once, not per socket:
    /// a flood of refused sockets would flood the log too).
    warned: bool,
}

impl PerClient {
    pub(crate) fn new(limit: usize) -> PerClient {
        PerClient {
            limit,
            open: Mutex::default(),
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Client>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more connection from `ip`, held until dropped; none when `ip`
    /// already has `limit` open.
    pub(crate) fn open(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        // An IPv4 client of a dual-stack listener is one client however it is written.
        let ip = ip.to_canonical();
        let mut open = self.lock();
        let client = open.entry(ip).or_default();
        if client.open >= self.limit {
            if !client.warned {
                client.warned = true;
                tracing::warn!(
                    "{ip} holds {} connections, the most one client may; refusing more",
                    self.limit
                );
            }
            return None;
        }
        client.open += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

/// One open connection of a client; the count falls when it is dropped.
pub(crate) struct ClientSlot {
    clients: Arc<PerClient>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.lock();
        if let Some(c) = open.get_mut(&self.ip) {
            c.open -= 1;
            // The map holds only clients with connections open, so it stays as small as
            // the global cap.
            if c.open == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Answers a connection over its client's limit with 429 and closes it, without waiting:
/// the answer is written only if the socket takes it at once (a client that does not
/// read gets the close alone).
pub(crate) fn refuse(stream: tokio::net::TcpStream, limit: usize) {
    let _ = stream.try_write(&refusal(limit));
}

/// The whole HTTP response [`refuse`] writes.
fn refusal(limit: usize) -> Vec<u8> {
    let error = ApiError::TooManyConnections(limit);
    let status = error.status();
    let body = error.body().to_string();
    let retry = error
        .into_response()
        .headers()
        .get(axum::http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("1")
        .to_string();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: {retry}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_limit_and_places_come_back() {
        let clients = Arc::new(PerClient::new(2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = clients.open(a).unwrap();
        let _second = clients.open(mapped).unwrap();
        assert!(clients.open(a).is_none());
        let _other = clients.open(b).unwrap();
        drop(first);
        assert!(clients.open(a).is_some());
    }

    #[test]
    fn the_refusal_is_a_429_that_says_why() {
        let text = String::from_utf8(refusal(7)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections");
        assert!(v["error"]["message"].as_str().unwrap().contains('7'));
    }
}
