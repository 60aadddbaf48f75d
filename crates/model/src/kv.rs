//! The key/value cache. Sliding-window layers keep a ring of `window` entries,
//! so their memory does not grow with the context; global layers keep the
//! whole context.

use crate::Config;

/// Cached keys and values of one layer.
#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    /// `cap` slots of `n_kv_heads * head_dim` keys (the layer's own sizes);
    /// empty on layers that reuse another layer's KV.
    pub k: Vec<f32>,
    /// `cap` slots of `n_kv_heads * value_dim` values.
    pub v: Vec<f32>,
    /// Number of slots; position `p` lives in slot `p % cap`.
    pub cap: usize,
}

/// The key/value cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub(crate) layers: Vec<LayerCache>,
    n_ctx: usize,
    n_past: usize,
}

impl KvCache {
    /// A cache for up to `n_ctx` positions.
    pub fn new(cfg: &Config, n_ctx: usize) -> Self {
        let layers = cfg
            .layers
            .iter()
            .map(|l| {
                let cap = l.window.map_or(n_ctx, |w| w.min(n_ctx)).max(1);
                let own = if l.kv_source.is_none() { cap } else { 0 };
                LayerCache {
                    k: vec![0.0; own * l.n_kv_heads * l.head_dim],
                    v: vec![0.0; own * l.n_kv_heads * l.value_dim],
                    cap,
                }
            })
            .collect();
        Self {
            layers,
            n_ctx,
            n_past: 0,
        }
    }

    /// Bytes a cache for `n_ctx` positions takes, computable before allocating.
    pub fn bytes_for(cfg: &Config, n_ctx: usize) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_source.is_none())
            .map(|l| {
                let cap = l.window.map_or(n_ctx, |w| w.min(n_ctx)).max(1);
                cap * l.n_kv_heads * (l.head_dim + l.value_dim) * std::mem::size_of::<f32>()
            })
            .sum()
    }

    /// Positions already processed.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Maximum positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Forget positions from `n` on, so generation can resume from a shared
    /// prefix. A sliding-window ring that has wrapped no longer holds the
    /// positions just before `n`, so a rewind is allowed only to 0 or while no
    /// ring has wrapped; returns whether the rewind happened.
    pub fn truncate(&mut self, n: usize) -> bool {
        if n >= self.n_past {
            return n == self.n_past;
        }
        let ok = n == 0 || self.layers.iter().all(|l| self.n_past <= l.cap);
        if ok {
            self.n_past = n;
        }
        ok
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.n_past = 0;
    }

    pub(crate) fn advance(&mut self, n: usize) {
        self.n_past += n;
    }
}
