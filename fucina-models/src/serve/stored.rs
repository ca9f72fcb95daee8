//! The Responses API's stored responses, for `previous_response_id` and `GET` / `DELETE
//! /v1/responses/{id}`: each finished response (unless the request said `store: false`)
//! keeps its response object and the conversation it ended, as chat messages (the input
//! items and the answer; not the `instructions`, which OpenAI does not carry over either).
//! Kept in memory, bounded by count and bytes, oldest dropped first; a restart forgets them.

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Most responses kept.
pub const MAX_STORED: usize = 256;
/// Most bytes of stored conversations (their JSON length), all together.
pub const MAX_STORED_BYTES: usize = 32 << 20;

/// Finished responses' conversations by response id (`resp_...`).
#[derive(Debug, Default)]
pub struct ResponseStore {
    inner: Mutex<Stored>,
}

#[derive(Debug, Default)]
struct Stored {
    /// Oldest first.
    entries: VecDeque<Entry>,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    id: String,
    messages: Vec<Value>,
    response: Value,
    /// The JSON length of both.
    size: usize,
}

impl ResponseStore {
    /// The conversation that response `id` ended, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Vec<Value>> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.iter().find(|e| e.id == id).map(|e| e.messages.clone())
    }

    /// The response object of response `id`, if it is still kept.
    pub fn response(&self, id: &str) -> Option<Value> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.iter().find(|e| e.id == id).map(|e| e.response.clone())
    }

    /// Forgets response `id`; whether it was kept.
    pub fn remove(&self, id: &str) -> bool {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = s.entries.iter().position(|e| e.id == id) else {
            return false;
        };
        if let Some(e) = s.entries.remove(i) {
            s.bytes -= e.size;
        }
        true
    }

    /// Keeps response `id`: its `response` object and `messages`, the conversation it ended,
    /// dropping the oldest entries past the caps. One larger than [`MAX_STORED_BYTES`] alone
    /// is not kept.
    pub fn put(&self, id: String, messages: Vec<Value>, response: Value) {
        let size: usize = messages.iter().map(|m| m.to_string().len()).sum::<usize>() + response.to_string().len();
        if size > MAX_STORED_BYTES {
            return;
        }
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while s.entries.len() >= MAX_STORED || s.bytes + size > MAX_STORED_BYTES {
            match s.entries.pop_front() {
                Some(e) => s.bytes -= e.size,
                None => break,
            }
        }
        s.bytes += size;
        s.entries.push_back(Entry { id, messages, response, size });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_newest_within_the_caps() {
        let store = ResponseStore::default();
        for i in 0..MAX_STORED + 3 {
            store.put(
                format!("resp_{i}"),
                vec![json!({ "role": "user", "content": i.to_string() })],
                json!({ "i": i }),
            );
        }
        assert!(store.get("resp_0").is_none() && store.get("resp_2").is_none());
        assert_eq!(store.get("resp_3").unwrap()[0]["content"], "3");
        assert_eq!(store.response("resp_3").unwrap()["i"], 3);
        assert!(store.get(&format!("resp_{}", MAX_STORED + 2)).is_some());
        let big = "x".repeat(MAX_STORED_BYTES / 2);
        store.put("a".into(), vec![json!(big)], Value::Null);
        store.put("b".into(), vec![json!(big)], Value::Null);
        assert!(store.get("a").is_none(), "the byte cap drops the oldest");
        assert!(store.get("b").is_some());
        store.put("huge".into(), vec![json!("y".repeat(MAX_STORED_BYTES + 1))], Value::Null);
        assert!(store.get("huge").is_none());
        // Removing frees its bytes: after 60 % of the cap comes and goes, 60 % and 30 % fit.
        let part = |f: f64| vec![json!("z".repeat((MAX_STORED_BYTES as f64 * f) as usize))];
        let store = ResponseStore::default();
        store.put("x".into(), part(0.6), Value::Null);
        assert!(store.remove("x") && !store.remove("x"));
        store.put("y".into(), part(0.6), Value::Null);
        store.put("w".into(), part(0.3), Value::Null);
        assert!(store.get("y").is_some() && store.get("w").is_some());
        assert!(store.response("b").is_none());
    }
}
