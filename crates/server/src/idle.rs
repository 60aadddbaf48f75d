//! Scale to zero: what counts as activity, and when the server has been
//! idle long enough to exit (`hearth serve --idle-exit SECS`).
//!
//! A request is in flight from the moment its headers arrive until its
//! response body has been sent in full (or its client has gone): a streamed
//! completion keeps the server awake for as long as it streams, not only
//! until its handler returns. Health and metrics probes do not count by
//! default, so a platform's health checker or a Prometheus scraper cannot
//! keep an idle server alive (and billed) for ever.

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// What the server has been doing: requests in flight, and when the last one
/// ended.
#[derive(Debug)]
pub struct Activity {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// When the server last stopped being busy (or was made ready).
    last: Instant,
}

impl Activity {
    /// Nothing in flight, idle since `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                last: now,
            }),
        }
    }

    /// The state, even if a holder panicked: two plain numbers cannot be
    /// left half-updated, so a poisoned lock is still good to read.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request starts; it counts until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> ActivityGuard {
        self.lock().in_flight += 1;
        ActivityGuard {
            activity: Arc::clone(self),
        }
    }

    /// Restart the quiet period at `now` (the model just finished loading:
    /// time spent loading is not idle time).
    pub fn touch(&self, now: Instant) {
        let mut s = self.lock();
        if now > s.last {
            s.last = now;
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// How long the server has been idle at `now`: `None` while any request
    /// is in flight.
    pub fn idle_for(&self, now: Instant) -> Option<Duration> {
        let s = self.lock();
        (s.in_flight == 0).then(|| now.saturating_duration_since(s.last))
    }

    /// Resolve once the server has been idle for `limit` without a break,
    /// returning how long that was; never resolves while requests keep
    /// coming or one stays in flight.
    pub async fn wait_idle(&self, limit: Duration) -> Duration {
        loop {
            let now = Instant::now();
            let nap = match self.idle_for(now) {
                Some(idle) if idle >= limit => return idle,
                // Wake exactly when the quiet period would end.
                Some(idle) => limit - idle,
                // Busy: look again later. The quiet period restarts when the
                // last request ends, so waking up to `limit` late here only
                // shortens the next nap.
                None => limit.min(Duration::from_secs(1)),
            };
            tokio::time::sleep(nap.max(Duration::from_millis(1))).await;
        }
    }
}

/// One request in flight; dropping it ends the request's activity.
#[derive(Debug)]
pub struct ActivityGuard {
    activity: Arc<Activity>,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        let mut s = self.activity.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        let now = Instant::now();
        if now > s.last {
            s.last = now;
        }
    }
}

/// A response body that holds an [`ActivityGuard`] until it has been sent
/// or dropped, so a stream counts as activity for as long as it flows.
/// Everything else (frames, end of stream, size) passes through untouched,
/// so a sized body keeps its `Content-Length`.
pub(crate) struct TrackedBody {
    inner: Body,
    _guard: ActivityGuard,
}

impl TrackedBody {
    /// Wrap `inner`, holding `guard` for its lifetime.
    pub(crate) fn new(inner: Body, guard: ActivityGuard) -> Self {
        Self {
            inner,
            _guard: guard,
        }
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        // `Body` is Unpin (a boxed body inside), so no pin projection is needed.
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn idle_time_counts_from_the_last_request_end() {
        let t0 = Instant::now();
        let a = Arc::new(Activity::new(t0));
        assert_eq!(a.idle_for(t0 + secs(5)), Some(secs(5)));
        let g = a.begin();
        assert_eq!(a.in_flight(), 1);
        // However long it runs, a request in flight is never idle time.
        assert_eq!(a.idle_for(t0 + secs(3600)), None);
        drop(g);
        assert_eq!(a.in_flight(), 0);
        let idle = a.idle_for(Instant::now() + secs(2)).expect("idle");
        assert!(idle >= secs(2), "{idle:?}");
    }

    #[test]
    fn overlapping_requests_hold_until_the_last_ends() {
        let t0 = Instant::now();
        let a = Arc::new(Activity::new(t0));
        let g1 = a.begin();
        let g2 = a.begin();
        drop(g1);
        assert_eq!(a.idle_for(t0 + secs(60)), None);
        drop(g2);
        assert!(a.idle_for(Instant::now()).is_some());
    }

    #[test]
    fn touch_restarts_the_quiet_period_and_never_goes_back() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        a.touch(t0 + secs(10));
        assert_eq!(a.idle_for(t0 + secs(12)), Some(secs(2)));
        a.touch(t0 + secs(1));
        assert_eq!(a.idle_for(t0 + secs(12)), Some(secs(2)));
        // A clock reading before the last activity is not negative idle time.
        assert_eq!(a.idle_for(t0), Some(Duration::ZERO));
    }

    #[test]
    fn a_tracked_body_holds_the_guard_and_keeps_its_size() {
        let a = Arc::new(Activity::new(Instant::now()));
        let body = TrackedBody::new(Body::from("hello"), a.begin());
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());
        assert_eq!(a.in_flight(), 1);
        drop(body);
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn wait_idle_returns_once_quiet() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let a = Activity::new(Instant::now());
        let idle = rt.block_on(a.wait_idle(Duration::from_millis(20)));
        assert!(idle >= Duration::from_millis(20), "{idle:?}");
    }
}
