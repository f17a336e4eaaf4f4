//! A private `redis-server` for tests of shared state (Debian's `redis-server`; CI installs
//! it): on a free port, without persistence, killed when dropped.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process of one test.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one, or `None` (saying so) when `redis-server` is not on the PATH; with
    /// `SPECDEC_REQUIRE_REDIS=1` (CI) that is a failure instead.
    pub fn start() -> Option<RedisServer> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var("SPECDEC_REQUIRE_REDIS").as_deref() != Ok("1"),
                "SPECDEC_REQUIRE_REDIS=1 but redis-server is not on the PATH"
            );
            eprintln!("skipped: redis-server is not on the PATH (apt-get install redis-server)");
            return None;
        }
        let free = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = free.local_addr().expect("its address").port();
        drop(free);
        let mut r = RedisServer { port, child: None };
        r.restart();
        Some(r)
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen in 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it (an outage).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
