//! The running bot: updates come in (long polling or a webhook), are stored,
//! answered chat by chat (several chats at once, each chat's messages in
//! order), and the replies go out from the stored outbox with retries.
//!
//! ```text
//! getUpdates / webhook ──► gate (allowlist, rate limit) ──► store.receive
//!        ──► dispatcher ──► one task per busy chat ──► store.finish
//!        ──► sender ──► sendMessage (429: wait; 5xx, timeouts: back off)
//! ```

use crate::api::{Api, ApiFailure};
use crate::brain::Brain;
use crate::handler::{self, Behaviour};
use crate::incoming::{parse_update, Incoming};
use crate::limit::{RateLimiter, Verdict};
use crate::store::{Outgoing, Store, StoreError};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

/// How updates reach the bot.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Ask Telegram with `getUpdates` (works behind NAT; no public URL).
    Polling,
    /// Telegram posts updates to `url`, served here on `listen`: the bot
    /// can sleep when nothing comes (scale to zero).
    Webhook {
        /// The public URL Telegram posts to; its path is the route served.
        url: String,
        /// Where to listen.
        listen: SocketAddr,
        /// Telegram sends it in `X-Telegram-Bot-Api-Secret-Token`; a post
        /// without it is refused.
        secret: String,
        /// The listener's bounds, as `hearth serve`'s: header and body
        /// time, body size, connections at once.
        limits: server::Limits,
    },
}

/// Retry delays: the first, doubling up to the most.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first delay.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

/// Everything `hearth telegram` configures.
#[derive(Debug, Clone)]
pub struct BotConfig {
    /// The bot's token.
    pub token: String,
    /// The Bot API's base URL (None: Telegram's).
    pub api_url: Option<String>,
    /// Chats allowed to talk to the bot (None: everyone).
    pub allow: Option<HashSet<i64>>,
    /// Where the state database lives.
    pub state_dir: PathBuf,
    /// How answers are made.
    pub behaviour: Behaviour,
    /// Messages a chat may send per `rate_window` (0: no limit).
    pub rate_limit: usize,
    /// The rate limit's window.
    pub rate_window: Duration,
    /// Polling or webhook.
    pub mode: Mode,
    /// How long one `getUpdates` waits for news.
    pub poll_wait: Duration,
    /// How long any other call may take.
    pub request_timeout: Duration,
    /// Delays between retries of failed calls.
    pub backoff: Backoff,
    /// Chats answered at the same time.
    pub concurrency: usize,
    /// On shutdown, how long answers in progress and unsent replies may take.
    pub drain: Duration,
}

impl BotConfig {
    /// Defaults for a bot with `token` keeping its state in `state_dir`.
    pub fn new(token: String, state_dir: PathBuf) -> Self {
        Self {
            token,
            api_url: None,
            allow: None,
            state_dir,
            behaviour: Behaviour::default(),
            rate_limit: 10,
            rate_window: Duration::from_secs(60),
            mode: Mode::Polling,
            poll_wait: Duration::from_secs(30),
            request_timeout: Duration::from_secs(20),
            backoff: Backoff {
                first: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            concurrency: 4,
            drain: Duration::from_secs(20),
        }
    }
}

/// Why the bot stopped.
#[derive(Debug, thiserror::Error)]
pub enum BotError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Telegram does not accept the token.
    #[error("Telegram refused the bot token ({0}); check it with @BotFather")]
    Token(String),
    /// The webhook's listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The polite line for chats not on the allowlist.
const PRIVATE: &str = "Sorry, this bot is private: it only answers the chats its owner allowed.";
/// The line for a chat over its rate limit.
const SLOW_DOWN: &str =
    "You're sending messages faster than I can answer, so I'll skip some. Please wait a minute.";

/// What every task of the bot shares.
struct Shared {
    cfg: BotConfig,
    store: Store,
    api: Api,
    brain: Arc<dyn Brain>,
    limiter: Mutex<RateLimiter>,
    /// Chats not on the allowlist told so in the current window.
    strangers: Mutex<RateLimiter>,
    work: mpsc::UnboundedSender<(u64, Incoming)>,
    outbox: Notify,
    slots: Semaphore,
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("hearth telegram: {msg}");
}

/// The state database in `state_dir`.
fn db_path(state_dir: &Path) -> PathBuf {
    state_dir.join("telegram.redb")
}

/// A message waiting in the work queue: its inbox key and what it is.
type Work = (u64, Incoming);

/// The bot as it opens: what every task shares, the receiving end of the
/// work queue, and the messages the last run left unanswered.
struct Opened {
    shared: Arc<Shared>,
    work: mpsc::UnboundedReceiver<Work>,
    pending: Vec<Work>,
}

/// Opens the state database and the API client.
fn open_shared(cfg: BotConfig, brain: Arc<dyn Brain>) -> Result<Opened, BotError> {
    std::fs::create_dir_all(&cfg.state_dir).map_err(|e| {
        BotError::Config(format!(
            "cannot create the state directory {}: {e}",
            cfg.state_dir.display()
        ))
    })?;
    let store = Store::open(&db_path(&cfg.state_dir))?;
    let api = Api::new(&cfg.token, cfg.api_url.as_deref(), cfg.request_timeout)
        .map_err(BotError::Config)?;
    let (work_tx, work_rx) = mpsc::unbounded_channel();
    let pending = store.inbox()?;
    let shared = Arc::new(Shared {
        limiter: Mutex::new(RateLimiter::new(cfg.rate_limit, cfg.rate_window)),
        strangers: Mutex::new(RateLimiter::new(1, cfg.rate_window)),
        slots: Semaphore::new(cfg.concurrency.max(1)),
        cfg,
        store,
        api,
        brain,
        work: work_tx,
        outbox: Notify::new(),
    });
    Ok(Opened {
        shared,
        work: work_rx,
        pending,
    })
}

/// Says what the last run left behind (an unclean stop, unanswered
/// messages, undelivered replies) and queues its unanswered messages again.
fn take_over_leftovers(sh: &Shared, db: &Path, pending: Vec<Work>) -> Result<(), BotError> {
    if sh.store.was_unclean() || sh.store.was_repaired() {
        log(format!(
            "the last run did not stop cleanly (it was killed, or the machine stopped): {} {}; every committed change is kept and work in flight is redone",
            db.display(),
            if sh.store.was_repaired() {
                "was repaired by redb (the write in flight rolled back)"
            } else {
                "needed no repair"
            }
        ));
    }
    if !pending.is_empty() {
        log(format!(
            "{} message(s) left unanswered by the last run: answering them now",
            pending.len()
        ));
    }
    let undelivered = sh.store.outbox_len()?;
    if undelivered > 0 {
        log(format!(
            "{undelivered} repl(ies) left undelivered by the last run: sending them now (one sent just before a crash may arrive twice)"
        ));
    }
    for p in pending {
        let _ = sh.work.send(p);
    }
    Ok(())
}

/// Starts receiving updates as the mode says: the polling loop, or the
/// webhook's listener (bound here, so a busy port fails the start) with
/// the webhook set at Telegram in the background.
async fn start_receiver(
    shared: &Arc<Shared>,
    stop: &watch::Receiver<bool>,
) -> Result<JoinHandle<Result<(), BotError>>, BotError> {
    Ok(match shared.cfg.mode.clone() {
        Mode::Polling => tokio::spawn(poll_loop(Arc::clone(shared), stop.clone())),
        Mode::Webhook {
            url,
            listen,
            secret,
            limits,
        } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| BotError::Listen {
                    addr: listen,
                    source,
                })?;
            tokio::spawn(set_webhook(Arc::clone(shared), url.clone(), secret.clone()));
            tokio::spawn(crate::webhook::serve(
                Arc::clone(shared) as Arc<dyn crate::webhook::Ingest>,
                listener,
                url,
                secret,
                limits,
                stop.clone(),
            ))
        }
    })
}

/// Tells Telegram where to post updates, trying 5 times with backoff.
async fn set_webhook(sh: Arc<Shared>, url: String, secret: String) {
    let mut delay = sh.cfg.backoff.first;
    for _ in 0..5 {
        match sh.api.set_webhook(&url, &secret).await {
            Ok(()) => return log(format!("webhook set to {url}")),
            Err(e) => log(format!("setWebhook failed ({e}); retrying")),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(sh.cfg.backoff.max);
    }
    log("could not set the webhook; Telegram keeps the one set before, if any");
}

/// The bot's running tasks, and the signals that stop them.
struct Tasks {
    receiver: JoinHandle<Result<(), BotError>>,
    dispatcher: JoinHandle<()>,
    sender: JoinHandle<()>,
    /// Stops receiving and starting answers.
    stop: watch::Sender<bool>,
    /// Tells the sender to send what is left and end.
    flush: watch::Sender<bool>,
}

impl Tasks {
    /// Stops the tasks in order (receiver, answers in progress, outbox)
    /// within the drain time, aborting what is not done by then, and
    /// records the clean stop.
    async fn wind_down(self, shared: &Shared) {
        let Tasks {
            mut receiver,
            mut dispatcher,
            mut sender,
            stop,
            flush,
        } = self;
        let _ = stop.send(true);
        let deadline = tokio::time::Instant::now() + shared.cfg.drain;
        if !receiver.is_finished() {
            let _ = tokio::time::timeout_at(deadline, &mut receiver).await;
            receiver.abort();
        }
        if tokio::time::timeout_at(deadline, &mut dispatcher)
            .await
            .is_err()
        {
            dispatcher.abort();
            log("answers still in progress are kept and redone at the next start");
        }
        let _ = flush.send(true);
        if tokio::time::timeout_at(deadline, &mut sender)
            .await
            .is_err()
        {
            sender.abort();
        }
        let left = shared.store.outbox_len().unwrap_or(0);
        if left > 0 {
            log(format!(
                "{left} repl(ies) not delivered yet: kept for the next start"
            ));
        }
        if let Err(e) = shared.store.close_cleanly() {
            log(format!("cannot record the clean stop: {e}"));
        }
    }
}

/// Run the bot until `shutdown` resolves (or the token is refused), then
/// finish what is in progress within the drain time. Work still undone is
/// kept in the state database and done at the next start.
pub async fn run(
    cfg: BotConfig,
    brain: Arc<dyn Brain>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), BotError> {
    let Opened {
        shared,
        work: work_rx,
        pending,
    } = open_shared(cfg, brain)?;
    let db = db_path(&shared.cfg.state_dir);
    take_over_leftovers(&shared, &db, pending)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (flush_tx, flush_rx) = watch::channel(false);
    let dispatcher = tokio::spawn(dispatch(Arc::clone(&shared), work_rx, stop_rx.clone()));
    let sender = tokio::spawn(send_loop(Arc::clone(&shared), flush_rx));
    let receiver = start_receiver(&shared, &stop_rx).await?;
    let mut tasks = Tasks {
        receiver,
        dispatcher,
        sender,
        stop: stop_tx,
        flush: flush_tx,
    };
    log(format!(
        "running ({}); state in {}",
        mode_name(&shared.cfg.mode),
        db.display()
    ));
    let mut outcome = Ok(());
    tokio::select! {
        () = shutdown => log("stopping: finishing the answers in progress"),
        r = &mut tasks.receiver => {
            outcome = r.unwrap_or_else(|e| Err(BotError::Config(format!("the receiver failed: {e}"))));
        }
    }
    tasks.wind_down(&shared).await;
    outcome
}

fn mode_name(m: &Mode) -> String {
    match m {
        Mode::Polling => "long polling".into(),
        Mode::Webhook { url, listen, .. } => format!("webhook {url} on {listen}"),
    }
}

/// Where received updates go: checked, stored, queued.
impl crate::webhook::Ingest for Shared {
    fn ingest(&self, raw: &Value) -> Result<(), StoreError> {
        let Some(r) = parse_update(raw) else {
            return Ok(());
        };
        let mut notices = Vec::new();
        let keep = r.item.and_then(|item| {
            let chat_id = item.chat_id();
            let say = |text: &str| Outgoing {
                chat_id,
                text: text.into(),
            };
            let allowed = self.cfg.allow.as_ref().is_none_or(|a| a.contains(&chat_id));
            if !allowed {
                // One line per window, however much a stranger writes.
                let first = self
                    .strangers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .check(chat_id, Instant::now());
                if first == Verdict::Allow {
                    notices.push(say(PRIVATE));
                }
                return None;
            }
            let verdict = self
                .limiter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .check(chat_id, Instant::now());
            match verdict {
                Verdict::Allow => Some(item),
                Verdict::Notify => {
                    notices.push(say(SLOW_DOWN));
                    None
                }
                Verdict::Drop => None,
            }
        });
        if self.store.receive(r.update_id, keep.as_ref(), &notices)? {
            if !notices.is_empty() {
                self.outbox.notify_one();
            }
            if let Some(item) = keep {
                let _ = self.work.send((r.update_id, item));
            }
        }
        Ok(())
    }
}

/// Long polling: ask for updates, store them, ask again; back off on
/// failures; stop for good only when the token is refused.
async fn poll_loop(sh: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<(), BotError> {
    if let Err(e) = sh.api.delete_webhook().await {
        if let ApiFailure::Refused {
            status: 401 | 404,
            description,
        } = e
        {
            return Err(BotError::Token(description));
        }
        log(format!("could not clear a webhook ({e}); polling anyway"));
    }
    let mut delay = sh.cfg.backoff.first;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let offset = match blocking(&sh, |s| s.store.offset()).await {
            Ok(o) => o,
            Err(e) => return Err(e.into()),
        };
        let got = tokio::select! {
            r = sh.api.get_updates(offset, sh.cfg.poll_wait) => r,
            _ = stop.changed() => return Ok(()),
        };
        let wait = match got {
            Ok(updates) => {
                delay = sh.cfg.backoff.first;
                let sh2 = Arc::clone(&sh);
                let stored = tokio::task::spawn_blocking(move || {
                    updates
                        .iter()
                        .try_for_each(|u| crate::webhook::Ingest::ingest(&*sh2, u))
                })
                .await;
                match stored {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => return Err(e.into()),
                    Err(e) => return Err(BotError::Config(format!("storing updates failed: {e}"))),
                }
            }
            Err(ApiFailure::Refused {
                status: 401 | 404,
                description,
            }) => return Err(BotError::Token(description)),
            Err(ApiFailure::RetryAfter(d)) => d,
            Err(e) => {
                log(format!(
                    "getUpdates failed ({e}); retrying in {:.1} s",
                    delay.as_secs_f64()
                ));
                let d = delay;
                delay = (delay * 2).min(sh.cfg.backoff.max);
                d
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// Hand each stored item to its chat's task: one task per chat at a time,
/// so a chat's messages are answered in order while other chats run.
async fn dispatch(
    sh: Arc<Shared>,
    mut work: mpsc::UnboundedReceiver<(u64, Incoming)>,
    mut stop: watch::Receiver<bool>,
) {
    let mut queues: HashMap<i64, VecDeque<(u64, Incoming)>> = HashMap::new();
    let mut busy: HashSet<i64> = HashSet::new();
    let mut tasks: JoinSet<i64> = JoinSet::new();
    let mut stopping = false;
    loop {
        tokio::select! {
            Some((id, item)) = work.recv(), if !stopping => {
                let chat = item.chat_id();
                if busy.insert(chat) {
                    tasks.spawn(answer_one(Arc::clone(&sh), id, item));
                } else {
                    queues.entry(chat).or_default().push_back((id, item));
                }
            }
            Some(done) = tasks.join_next() => {
                let chat = match done {
                    Ok(chat) => chat,
                    Err(e) => {
                        log(format!("an answer task failed: {e}"));
                        continue;
                    }
                };
                match queues.get_mut(&chat).and_then(VecDeque::pop_front) {
                    Some((id, item)) if !stopping => {
                        tasks.spawn(answer_one(Arc::clone(&sh), id, item));
                    }
                    _ => {
                        busy.remove(&chat);
                        queues.remove(&chat);
                    }
                }
            }
            _ = stop.changed(), if !stopping => stopping = true,
            else => {}
        }
        if stopping && tasks.is_empty() {
            return;
        }
    }
}

/// The largest photo file the bot downloads (Telegram's own limit for bots
/// is 20 MB; its photos are far smaller).
const MAX_PHOTO_BYTES: usize = 20 << 20;

/// Answer one stored item and move it to the outbox; "typing…" shows while
/// the model works.
async fn answer_one(sh: Arc<Shared>, update_id: u64, item: Incoming) -> i64 {
    let chat = item.chat_id();
    let _slot = sh.slots.acquire().await;
    let typing = if handler::needs_model(&item) {
        // The first "typing…" goes out before the model starts (a short
        // reply would otherwise be sent before it), then every 4 s: Telegram
        // shows it for 5.
        let _ = tokio::time::timeout(Duration::from_secs(2), sh.api.typing(chat)).await;
        let api = sh.api.clone();
        Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                let _ = tokio::time::timeout(Duration::from_secs(4), api.typing(chat)).await;
            }
        }))
    } else {
        None
    };
    // A photo's or voice note's file comes from Telegram first (when the
    // model reads it).
    let file_id = match &item {
        Incoming::Photo { file_id, .. } if sh.brain.reads_images() => Some(file_id),
        Incoming::Voice { file_id, .. } if sh.brain.hears() => Some(file_id),
        _ => None,
    };
    let photo = match file_id {
        Some(id) => Some(
            sh.api
                .download_file(id, MAX_PHOTO_BYTES)
                .await
                .map_err(|e| e.to_string()),
        ),
        None => None,
    };
    if let Some(Err(e)) = &photo {
        log(format!(
            "could not download the file of update {update_id}: {e}"
        ));
    }
    let sh2 = Arc::clone(&sh);
    let done = tokio::task::spawn_blocking(move || {
        let mut state = sh2.store.chat(chat)?;
        let a = handler::answer_with(&*sh2.brain, &sh2.cfg.behaviour, &mut state, &item, photo);
        let out: Vec<Outgoing> = a
            .texts
            .into_iter()
            .map(|text| Outgoing {
                chat_id: chat,
                text,
            })
            .collect();
        sh2.store
            .finish(update_id, a.changed.then_some((chat, &state)), &out)
    })
    .await;
    if let Some(t) = typing {
        t.abort();
    }
    match done {
        Ok(Ok(())) => sh.outbox.notify_one(),
        Ok(Err(e)) => log(format!(
            "could not store the answer to update {update_id}: {e} (kept for the next start)"
        )),
        Err(e) => log(format!("answering update {update_id} failed: {e}")),
    }
    chat
}

/// Deliver the outbox in order: a reply leaves it once Telegram has it, or
/// when Telegram refuses it for good. Ends when `flush` is set and the
/// outbox is empty.
async fn send_loop(sh: Arc<Shared>, mut flush: watch::Receiver<bool>) {
    let mut delay = sh.cfg.backoff.first;
    loop {
        let next = match blocking(&sh, |s| s.store.next_outgoing()).await {
            Ok(n) => n,
            Err(e) => {
                log(format!("cannot read the outbox: {e}"));
                None
            }
        };
        let Some((key, out)) = next else {
            if *flush.borrow() {
                return;
            }
            tokio::select! {
                () = sh.outbox.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = flush.changed() => {}
            }
            continue;
        };
        let wait = match sh.api.send_message(out.chat_id, &out.text).await {
            Ok(()) => {
                delay = sh.cfg.backoff.first;
                if let Err(e) = blocking(&sh, move |s| s.store.sent(key)).await {
                    log(format!("cannot update the outbox: {e}"));
                }
                continue;
            }
            Err(ApiFailure::RetryAfter(d)) => d,
            // A 4xx is about this message (the chat is gone, the bot was
            // blocked): drop it, not the queue behind it. 401 and 404 are
            // about the token: keep it and back off.
            Err(ApiFailure::Refused {
                status,
                description,
            }) if status != 401 && status != 404 => {
                log(format!(
                    "dropping a reply to chat {}: {description}",
                    out.chat_id
                ));
                if let Err(e) = blocking(&sh, move |s| s.store.sent(key)).await {
                    log(format!("cannot update the outbox: {e}"));
                }
                continue;
            }
            Err(e) => {
                log(format!(
                    "sendMessage failed ({e}); retrying in {:.1} s",
                    delay.as_secs_f64()
                ));
                let d = delay;
                delay = (delay * 2).min(sh.cfg.backoff.max);
                d
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// Run a store call off the async threads (redb syncs to disk).
async fn blocking<T: Send + 'static>(
    sh: &Arc<Shared>,
    f: impl FnOnce(&Shared) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let sh = Arc::clone(sh);
    tokio::task::spawn_blocking(move || f(&sh))
        .await
        .unwrap_or_else(|e| Err(redb::Error::Io(std::io::Error::other(e.to_string())).into()))
}

/// Run the bot on its own runtime until SIGTERM or SIGINT (Ctrl-C).
pub fn run_until_signal(cfg: BotConfig, brain: Arc<dyn Brain>) -> Result<(), BotError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hearth-telegram")
        .enable_all()
        .build()
        .map_err(|e| BotError::Config(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(run(cfg, brain, signal()));
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

/// SIGTERM (a platform stopping the container) or SIGINT.
async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
