//! The Responses API's stored responses, for `previous_response_id`: each finished response
//! (unless the request said `store: false`) keeps the conversation it ended, as chat
//! messages (the input items and the answer; not the `instructions`, which OpenAI does not
//! carry over either). Kept in memory, bounded by count and bytes, oldest dropped first; a
//! restart forgets them.

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
    /// Oldest first: id, messages, their JSON length.
    entries: VecDeque<(String, Vec<Value>, usize)>,
    bytes: usize,
}

impl ResponseStore {
    /// The conversation that response `id` ended, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Vec<Value>> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.entries.iter().find(|(k, ..)| k == id).map(|(_, m, _)| m.clone())
    }

    /// Keeps `messages` as the conversation of response `id`, dropping the oldest entries
    /// past the caps. A conversation larger than [`MAX_STORED_BYTES`] alone is not kept.
    pub fn put(&self, id: String, messages: Vec<Value>) {
        let size: usize = messages.iter().map(|m| m.to_string().len()).sum();
        if size > MAX_STORED_BYTES {
            return;
        }
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while s.entries.len() >= MAX_STORED || s.bytes + size > MAX_STORED_BYTES {
            match s.entries.pop_front() {
                Some((_, _, n)) => s.bytes -= n,
                None => break,
            }
        }
        s.bytes += size;
        s.entries.push_back((id, messages, size));
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
            store.put(format!("resp_{i}"), vec![json!({ "role": "user", "content": i.to_string() })]);
        }
        assert!(store.get("resp_0").is_none() && store.get("resp_2").is_none());
        assert_eq!(store.get("resp_3").unwrap()[0]["content"], "3");
        assert!(store.get(&format!("resp_{}", MAX_STORED + 2)).is_some());
        let big = "x".repeat(MAX_STORED_BYTES / 2);
        store.put("a".into(), vec![json!(big)]);
        store.put("b".into(), vec![json!(big)]);
        assert!(store.get("a").is_none(), "the byte cap drops the oldest");
        assert!(store.get("b").is_some());
        store.put("huge".into(), vec![json!("y".repeat(MAX_STORED_BYTES + 1))]);
        assert!(store.get("huge").is_none());
    }
}
