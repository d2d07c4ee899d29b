//! The last-known-good answers of read operations ([`ReadCache`]), which a
//! read declared `on_unavailable = "degrade"` is answered from while its
//! provider is unavailable. In memory, per process: a restart forgets them.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;
use serde_json::Value;

/// Last-known-good answers kept, at most (least recently used go first).
const CACHED_READS: usize = 10_000;

/// The last-known-good answer of each read, by provider, operation and
/// query (in memory, per process).
#[derive(Debug)]
pub struct ReadCache(Mutex<LruCache<ReadKey, Good>>);

/// A read: provider, operation and query string, as asked.
pub type ReadKey = (String, String, String);

impl Default for ReadCache {
    fn default() -> Self {
        Self(Mutex::new(LruCache::new(NonZeroUsize::new(CACHED_READS).unwrap_or(NonZeroUsize::MIN))))
    }
}

/// A provider's 2xx answer to a read.
#[derive(Clone, Debug)]
pub struct Good {
    /// The HTTP status the provider answered (2xx).
    pub status: u16,
    /// The provider's answer body.
    pub response: Value,
    /// When it was answered, on tokio's clock (for its age; paused test
    /// time moves it).
    pub at: tokio::time::Instant,
    /// When it was answered, in ms since the Unix epoch.
    pub at_ms: i64,
}

impl ReadCache {
    /// Keeps `good` as the last-known-good answer of `key` (a read:
    /// provider, operation and query string), dropping the least recently
    /// used answer past 10,000.
    pub fn put(&self, key: ReadKey, good: Good) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).put(key, good);
    }

    /// The last-known-good answer of `key`, if one is kept.
    pub fn get(&self, key: &ReadKey) -> Option<Good> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }
}
