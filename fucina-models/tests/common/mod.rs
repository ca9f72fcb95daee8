//! Shared by the server tests: the `serve` binary started on a free loopback port.
#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `serve`, killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve --port 0` with `args` and waits for its address.
pub fn start(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--port", "0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines.next().expect("server output").unwrap();
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.trim().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let addr = base.trim_start_matches("http://").to_string();
    Server { child, base, addr }
}
