//! Shared by the integration tests: the `serve` binary started on a free loopback port,
//! logit comparisons, and the checks of a decoder family's goldens ([`goldens`]).
#![allow(dead_code)] // each test binary uses its own part

pub mod goldens;

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

/// A streamed chat completion's text: the `delta.content` of every server-sent event until
/// `[DONE]`.
pub fn streamed_content(resp: ureq::Response) -> String {
    let mut out = String::new();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.unwrap();
        match line.strip_prefix("data: ") {
            Some("[DONE]") => break,
            Some(d) => {
                let c: serde_json::Value = serde_json::from_str(d).unwrap();
                out.push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
            None => {}
        }
    }
    out
}

/// How close logits `a` are to `b`: cosine similarity, and the largest difference over the
/// largest magnitude of `b`.
pub fn closeness(a: &[f32], b: &[f32]) -> (f64, f32) {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let dmax = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    (dot / (na * nb), dmax / amax)
}

/// A golden's logits rows (`[[f64]]` JSON) as f32.
pub fn logit_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

/// The index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

/// The largest absolute difference of two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
