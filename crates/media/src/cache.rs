//! Image embeddings kept by the content of the file they came from.

use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// The key of a file's content: its SHA-256.
pub fn content_key(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// One cached image: its content key and embeddings.
type Entry = ([u8; 32], Arc<Vec<f32>>);

/// The most recently used image embeddings, by content key. Shared between
/// sessions; encoding happens outside the lock, so two requests for the same
/// new picture may both encode it (the second result is dropped).
#[derive(Debug)]
pub struct EmbeddingCache {
    capacity: usize,
    /// Most recently used last.
    entries: Mutex<Vec<Entry>>,
}

impl EmbeddingCache {
    /// A cache holding at most `capacity` images (0 keeps nothing).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The embeddings under `key`, marked as just used.
    pub fn get(&self, key: &[u8; 32]) -> Option<Arc<Vec<f32>>> {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let i = e.iter().position(|(k, _)| k == key)?;
        let hit = e.remove(i);
        let value = Arc::clone(&hit.1);
        e.push(hit);
        Some(value)
    }

    /// Keep `value` under `key`, evicting the least recently used entry when
    /// full; returns what is now stored.
    pub fn insert(&self, key: [u8; 32], value: Vec<f32>) -> Arc<Vec<f32>> {
        let value = Arc::new(value);
        if self.capacity == 0 {
            return value;
        }
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = e.iter().position(|(k, _)| *k == key) {
            e.remove(i);
        }
        if e.len() >= self.capacity {
            e.remove(0);
        }
        e.push((key, Arc::clone(&value)));
        value
    }

    /// The embeddings under `key`, computed by `encode` on a miss.
    pub fn get_or_encode<E>(
        &self,
        key: [u8; 32],
        encode: impl FnOnce() -> Result<Vec<f32>, E>,
    ) -> Result<(Arc<Vec<f32>>, bool), E> {
        if let Some(v) = self.get(&key) {
            return Ok((v, true));
        }
        Ok((self.insert(key, encode()?), false))
    }

    /// How many images are held.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recently_used() {
        let c = EmbeddingCache::new(2);
        let (a, b, d) = (content_key(b"a"), content_key(b"b"), content_key(b"d"));
        c.insert(a, vec![1.0]);
        c.insert(b, vec![2.0]);
        assert_eq!(*c.get(&a).unwrap(), vec![1.0]); // a is now the newest
        c.insert(d, vec![3.0]); // evicts b
        assert!(c.get(&b).is_none());
        assert_eq!(c.len(), 2);
        let (v, hit) = c.get_or_encode::<()>(a, || panic!("a is cached")).unwrap();
        assert!(hit);
        assert_eq!(*v, vec![1.0]);
        let (v, hit) = c.get_or_encode::<()>(b, || Ok(vec![9.0])).unwrap();
        assert!(!hit);
        assert_eq!(*v, vec![9.0]);
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let c = EmbeddingCache::new(0);
        c.insert(content_key(b"x"), vec![1.0]);
        assert!(c.is_empty());
    }
}
