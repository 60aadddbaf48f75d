//! `hearth serve` over HTTP on the tiny model: error shapes and statuses,
//! streaming format, concurrency with clients hanging up, health and
//! metrics, slow clients and graceful shutdown.

use crate::serve_common;

use serde_json::Value;
use serve_common::{connect, parse_response, raw_request, Server, TINY};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const CHAT: &str = r#"{"model":"model-f32","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":6,"temperature":0}"#;

#[test]
fn errors_have_the_openai_shape_and_status() {
    let mut s = Server::start(TINY, &["--ctx", "32", "--body-limit", "1048576"]);
    bad_bodies_are_400s(&s);
    bad_parameters_are_400s_that_name_them(&s);
    unknown_routes_and_models_are_404s_wrong_methods_405s(&s);
    bodies_over_the_limit_are_413s(&s);
    the_context_refuses_long_prompts_and_caps_max_tokens(&s);
    s.assert_alive();
}

/// Malformed, garbage and non-object bodies, and JSON nested past
/// serde_json's recursion limit.
fn bad_bodies_are_400s(s: &Server) {
    for body in [
        &b"{"[..],
        b"not json at all",
        b"",
        b"[1,2]",
        b"\x00\x01\x02\xff\xfe",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
        b"{\"messages\": 3}",
    ] {
        let r = s.request("POST", "/v1/chat/completions", &[], body);
        r.assert_error(400);
    }
    // Deeply nested JSON hits serde_json's recursion limit, not the stack.
    let deep = format!(
        "{{\"messages\":[{{\"role\":\"user\",\"content\":\"x\"}}],\"extra\":{}{}}}",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    s.post("/v1/chat/completions", &deep).assert_error(400);
}

/// Out-of-range and mistyped parameters; those checked by name say which.
fn bad_parameters_are_400s_that_name_them(s: &Server) {
    for (body, param) in [
        (
            r#"{"messages":[{"role":"user","content":"x"}],"temperature":-0.5}"#,
            "temperature",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"top_p":1.5}"#,
            "top_p",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
            "max_tokens",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":-3}"#,
            "max_tokens",
        ),
        (r#"{"messages":[{"role":"user","content":"x"}],"n":0}"#, "n"),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"n":129}"#,
            "n",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}"#,
            "top_logprobs",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
            "top_logprobs",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"presence_penalty":9}"#,
            "presence_penalty",
        ),
        (r#"{"messages":[]}"#, "messages"),
    ] {
        let r = s.post("/v1/chat/completions", body);
        r.assert_error(400);
        assert_eq!(r.json()["error"]["param"], param, "{}", r.text());
    }
    s.post(
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
    )
    .assert_error(400);
    s.post("/v1/completions", r#"{"prompt":"x","n":200}"#)
        .assert_error(400);
    // A generative model asked to embed: a 400 that says so, not a 404.
    let msg = s
        .post("/v1/embeddings", r#"{"input":"hello"}"#)
        .assert_error(400);
    assert!(msg.contains("does not embed"), "{msg}");
    s.post("/v1/completions", r#"{"prompt":"x","logprobs":"yes"}"#)
        .assert_error(400);
}

/// Unknown route, unknown model (as the chat's model and as a model's
/// page), and a route asked with the wrong method.
fn unknown_routes_and_models_are_404s_wrong_methods_405s(s: &Server) {
    s.request("GET", "/v2/nothing", &[], b"").assert_error(404);
    let r = s.post(
        "/v1/chat/completions",
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}"#,
    );
    r.assert_error(404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    s.request("GET", "/v1/models/gpt-4o", &[], b"")
        .assert_error(404);
    assert_eq!(
        s.request("GET", "/v1/models/model-f32", &[], b"").status,
        200
    );
    s.request("GET", "/v1/chat/completions", &[], b"")
        .assert_error(405);
}

/// A body over the limit: said up front by Content-Length (the answer comes
/// before the body is sent), or found while reading a chunked body.
fn bodies_over_the_limit_are_413s(s: &Server) {
    let mut c = connect(&s.addr).unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2097152\r\n\r\n{\"prompt\":\"")
        .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    parse_response(&raw).unwrap().assert_error(413);
    let mut c = connect(&s.addr).unwrap();
    c.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    let chunk = format!("10000\r\n{}\r\n", "a".repeat(0x10000));
    for _ in 0..17 {
        if c.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    parse_response(&raw).unwrap().assert_error(413);
}

/// On a server of a 32-token context: a longer prompt is a 400 with both
/// numbers in its message, a huge `max_tokens` is capped, not an error.
fn the_context_refuses_long_prompts_and_caps_max_tokens(s: &Server) {
    let long = format!(
        r#"{{"prompt":"{}","max_tokens":4}}"#,
        "hello there ".repeat(20)
    );
    let r = s.post("/v1/completions", &long);
    let msg = r.assert_error(400);
    assert!(msg.contains("32"), "{msg}");
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");

    let r = s.post(
        "/v1/completions",
        r#"{"prompt":"hi","max_tokens":1000000000,"temperature":0}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap() <= 32);
}

#[test]
fn api_key_is_required_when_set() {
    let mut s = Server::start(TINY, &["--api-key", "sekret"]);
    s.post("/v1/chat/completions", CHAT).assert_error(401);
    let r = s.request(
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer wrong")],
        b"",
    );
    r.assert_error(401);
    let r = s.request(
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer sekret")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["id"], "model-f32");
    let r = s.request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer sekret")],
        CHAT.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Health and metrics are behind the key too...
    s.request("GET", "/health", &[], b"").assert_error(401);
    s.request("GET", "/metrics", &[], b"").assert_error(401);
    assert_eq!(s.probe("/metrics").status, 200);
    s.assert_alive();
    // ...unless --public-health opens them for a platform's probes.
    let mut open = Server::start(TINY, &["--api-key", "sekret", "--public-health"]);
    assert_eq!(open.request("GET", "/health", &[], b"").status, 200);
    assert_eq!(open.request("GET", "/metrics", &[], b"").status, 200);
    open.post("/v1/chat/completions", CHAT).assert_error(401);
    open.assert_alive();
}

#[test]
fn responses_and_streams_have_the_openai_shape() {
    let mut s = Server::start(TINY, &[]);
    a_chat_completion_has_the_openai_shape(&s);

    // Same seed, same output.
    let seeded = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":1.0,"seed":42}"#;
    let a = s.post("/v1/chat/completions", seeded).json();
    let b = s.post("/v1/chat/completions", seeded).json();
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"]);

    a_chat_stream_has_the_openai_shape_and_the_plain_text(&s);
    let v = completions_streamed_give_the_plain_text(&s);
    a_stop_string_is_answered(&s, &v);

    // Models.
    let v = s.request("GET", "/v1/models", &[], b"").json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["object"], "model");
    s.assert_alive();
}

/// A plain chat completion: its object, model, message, finish reason and
/// usage that adds up within `max_tokens`.
fn a_chat_completion_has_the_openai_shape(s: &Server) {
    let r = s.post("/v1/chat/completions", CHAT);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "model-f32");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
    let reason = v["choices"][0]["finish_reason"].as_str().unwrap();
    assert!(reason == "stop" || reason == "length", "{v}");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["completion_tokens"].as_u64().unwrap() <= 6);
}

/// Streaming chat: role first, content deltas, a finish chunk, usage,
/// [DONE]; and the streamed text is the non-streamed text of the same
/// greedy request.
fn a_chat_stream_has_the_openai_shape_and_the_plain_text(s: &Server) {
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
    let r = s.post("/v1/chat/completions", body);
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.len() >= 3, "{chunks:?}");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let id = &chunks[0]["id"];
    assert!(chunks.iter().all(|c| &c["id"] == id));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let finish = &chunks[chunks.len() - 2];
    assert!(
        finish["choices"][0]["finish_reason"].is_string(),
        "{finish}"
    );
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() <= 5);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let plain = s
        .post(
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0}"#,
        )
        .json();
    assert_eq!(plain["choices"][0]["message"]["content"], streamed.as_str());
}

/// A plain completion has its shape, and the same request streamed gives
/// its text; returns the plain completion.
fn completions_streamed_give_the_plain_text(s: &Server) -> Value {
    let r = s.post(
        "/v1/completions",
        r#"{"prompt":"Once upon","max_tokens":4,"temperature":0}"#,
    );
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert!(v["choices"][0]["text"].is_string());
    let r = s.post(
        "/v1/completions",
        r#"{"prompt":"Once upon","max_tokens":4,"temperature":0,"stream":true}"#,
    );
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let text: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, v["choices"][0]["text"].as_str().unwrap());
    v
}

/// A completion with a stop string (the second character of `completion`'s
/// text: it ends the text before it) is answered.
fn a_stop_string_is_answered(s: &Server, completion: &Value) {
    let r = s.post(
        "/v1/completions",
        &format!(
            r#"{{"prompt":"Once upon","max_tokens":8,"temperature":0,"stop":[{}]}}"#,
            serde_json::to_string(
                &completion["choices"][0]["text"]
                    .as_str()
                    .unwrap()
                    .chars()
                    .nth(1)
                    .unwrap_or('x')
                    .to_string()
            )
            .unwrap()
        ),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn health_and_metrics() {
    let mut s = Server::start(TINY, &["--parallel", "2"]);
    assert_eq!(s.request("GET", "/health", &[], b"").json()["status"], "ok");
    s.post("/v1/chat/completions", CHAT);
    let m = s.request("GET", "/metrics", &[], b"");
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text();
    for name in [
        "hearth_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1",
        "hearth_queue_depth 0",
        "hearth_slots_total 2",
        "hearth_decode_tokens_per_second",
        "hearth_prefill_tokens_saved_total",
        "hearth_completion_tokens_total",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(s.metric("hearth_completion_tokens_total") >= 1.0);
    assert!(s.metric("hearth_prompt_tokens_total") >= 1.0);
    s.assert_alive();
}

/// Read an SSE response until `[DONE]` or EOF, or stop after `hang_up_after`
/// bytes. Returns (status, saw_done).
fn stream_once(addr: &str, body: &str, hang_up_after: Option<usize>) -> (u16, bool) {
    let Ok(mut c) = connect(addr) else {
        return (0, false);
    };
    if c.write_all(&raw_request(
        "POST",
        "/v1/chat/completions",
        &[],
        body.as_bytes(),
    ))
    .is_err()
    {
        return (0, false);
    }
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if hang_up_after.is_some_and(|h| raw.len() >= h) {
            // Hang up mid-stream.
            return (parse_response(&raw).map(|r| r.status).unwrap_or(0), false);
        }
    }
    let text = String::from_utf8_lossy(&raw);
    let status = parse_response(&raw).map(|r| r.status).unwrap_or(0);
    (status, text.contains("data: [DONE]"))
}

#[test]
fn concurrent_clients_some_hanging_up() {
    let mut s = Server::start(TINY, &["--parallel", "2", "--queue", "64"]);
    let addr = s.addr.clone();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for j in 0..4 {
                    let stream = (i + j) % 2 == 0;
                    let body = format!(
                        r#"{{"messages":[{{"role":"user","content":"client {i} request {j}"}}],"max_tokens":{},"stream":{stream}}}"#,
                        20 + 10 * j
                    );
                    let hang_up = (i % 3 == 0).then_some(300);
                    if stream {
                        let (status, done) = stream_once(&addr, &body, hang_up);
                        results.push((status, done || hang_up.is_some()));
                    } else if let Some(n) = hang_up {
                        // Hang up before the answer comes.
                        if let Ok(mut c) = connect(&addr) {
                            let _ = c.write_all(&raw_request("POST", "/v1/chat/completions", &[], body.as_bytes()));
                            let mut buf = vec![0u8; n.min(10)];
                            let _ = c.set_read_timeout(Some(Duration::from_millis(5)));
                            let _ = c.read(&mut buf);
                        }
                        results.push((200, true));
                    } else {
                        let r = serve_common::try_request(&addr, "POST", "/v1/chat/completions", &[], body.as_bytes());
                        match r {
                            Ok(r) => {
                                let ok = r.status == 200 && r.json()["choices"][0]["message"]["content"].is_string();
                                results.push((r.status, ok));
                            }
                            Err(_) => results.push((0, false)),
                        }
                    }
                }
                results
            })
        })
        .collect();
    for h in handles {
        for (status, ok) in h.join().expect("client thread") {
            assert_eq!(status, 200, "stderr:\n{}", s.stderr());
            assert!(ok);
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(120));
    // Every slot comes free again and the server still answers.
    assert_eq!(s.settled_metric("hearth_slots_busy", 0.0), 0.0);
    assert_eq!(s.metric("hearth_queue_depth"), 0.0);
    assert_eq!(s.metric("hearth_internal_errors_total"), 0.0);
    assert_eq!(s.post("/v1/chat/completions", CHAT).status, 200);
    s.assert_alive();
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let mut s = Server::start(TINY, &["--parallel", "1", "--queue", "1"]);
    let addr = s.addr.clone();
    // Long generations so the slot and the queue stay full for a while.
    let body = r#"{"prompt":"a","max_tokens":100000,"stream":false}"#;
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                serve_common::try_request(&addr, "POST", "/v1/completions", &[], body.as_bytes())
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for h in handles {
        let r = h.join().unwrap().expect("response");
        if r.status == 429 {
            r.assert_error(429);
            assert!(r.header("retry-after").is_some());
        }
        statuses.push(r.status);
    }
    assert!(
        statuses.iter().all(|&c| c == 200 || c == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(s.metric("hearth_requests_rejected_total") >= 1.0);
    s.assert_alive();
}

#[test]
fn slow_clients_are_cut_off() {
    let mut s = Server::start(TINY, &["--read-timeout", "2"]);
    // A body trickling in one byte a second gets 408 after the timeout.
    let t0 = Instant::now();
    let mut c = connect(&s.addr).unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 200\r\n\r\n")
        .unwrap();
    let mut answered = Vec::new();
    c.set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    for _ in 0..10 {
        if c.write_all(b"{").is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answered.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let r = parse_response(&answered).expect("a response before the client gave up");
    r.assert_error(408);
    assert!(t0.elapsed() < Duration::from_secs(8));

    // Headers trickling in: the connection is closed.
    let t0 = Instant::now();
    let mut c = connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    let mut closed = false;
    for b in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaa".iter() {
        if c.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match c.read(&mut buf) {
            Ok(_) => {
                closed = true;
                break;
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    assert!(closed, "the slow header connection was not closed");
    assert!(t0.elapsed() < Duration::from_secs(8));
    s.assert_alive();
}

#[test]
fn sigterm_lets_requests_finish_and_exits_zero() {
    let mut s = Server::start(TINY, &["--shutdown-timeout", "20"]);
    // A streaming request in flight when the signal comes still completes.
    let mut c = connect(&s.addr).unwrap();
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":3000,"stream":true,"temperature":1.0}"#;
    c.write_all(&raw_request(
        "POST",
        "/v1/chat/completions",
        &[],
        body.as_bytes(),
    ))
    .unwrap();
    let mut first = [0u8; 64];
    let n = c.read(&mut first).unwrap();
    assert!(n > 0);
    s.sigterm();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let mut all = first[..n].to_vec();
    all.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&all);
    assert!(
        text.contains("data: [DONE]"),
        "stream cut: ...{}",
        &text[text.len().saturating_sub(300)..]
    );
    let st = s.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "exit {st:?}; stderr:\n{}", s.stderr());
    assert!(!s.stderr().contains("panicked"));
    // Nothing listens any more.
    assert!(connect(&s.addr).is_err());
}

#[test]
fn sigterm_cancels_what_outlasts_the_timeout() {
    let mut s = Server::start(
        TINY,
        &[
            "--shutdown-timeout",
            "1",
            "--ctx",
            "4096",
            "--parallel",
            "1",
            "--queue",
            "16",
        ],
    );
    // Twelve long generations one after another take several seconds,
    // far past the one-second shutdown timeout.
    let clients: Vec<_> = (0..12)
        .map(|_| {
            let addr = s.addr.clone();
            std::thread::spawn(move || {
                let body = r#"{"prompt":"a","max_tokens":100000,"temperature":1.0}"#;
                serve_common::try_request(&addr, "POST", "/v1/completions", &[], body.as_bytes())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.sigterm();
    let st = s.wait_exit(Duration::from_secs(15));
    assert!(st.success(), "exit {st:?}; stderr:\n{}", s.stderr());
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(s.stderr().contains("cancelling"), "{}", s.stderr());
    // Every client got an answer (finished, or 503 when cancelled), none hung.
    for c in clients {
        if let Ok(r) = c.join().unwrap() {
            assert!(r.status == 200 || r.status == 503, "{}", r.text());
        }
    }
}

#[test]
fn a_client_that_hangs_up_frees_its_slot() {
    let s = Server::start(TINY, &["--ctx", "4096", "--parallel", "1"]);
    // `<eos>` (id 1) banned: a sampled end would finish a generation before
    // its client hangs up, and this test counts cancellations.
    let long = r#"{"prompt":"a","max_tokens":100000,"temperature":1.0,"logit_bias":{"1":-100}}"#;
    // Non-streaming: hang up while the answer is being generated.
    {
        let mut c = connect(&s.addr).unwrap();
        c.write_all(&raw_request(
            "POST",
            "/v1/completions",
            &[],
            long.as_bytes(),
        ))
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    // Streaming: hang up after the first chunk.
    {
        let stream = r#"{"prompt":"a","max_tokens":100000,"temperature":1.0,"stream":true,"logit_bias":{"1":-100}}"#;
        let mut c = connect(&s.addr).unwrap();
        c.write_all(&raw_request(
            "POST",
            "/v1/completions",
            &[],
            stream.as_bytes(),
        ))
        .unwrap();
        let mut buf = [0u8; 64];
        assert!(c.read(&mut buf).unwrap() > 0);
    }
    let t0 = Instant::now();
    while s.metric("hearth_generations_cancelled_total") < 2.0
        && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.metric("hearth_generations_cancelled_total"), 2.0);
    // Cancelled early: far fewer tokens than two full generations.
    assert!(s.metric("hearth_completion_tokens_total") < 4000.0);
    assert_eq!(s.settled_metric("hearth_slots_busy", 0.0), 0.0);
}

/// A small xorshift generator: the fuzz cases are the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn fuzzed_bodies_get_4xx_or_an_answer_never_500() {
    let mut s = Server::start(TINY, &["--ctx", "64"]);
    let valid = [
        CHAT.as_bytes().to_vec(),
        br#"{"prompt":"Once upon","max_tokens":4,"stop":["a","b"],"stream":true}"#.to_vec(),
    ];
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for case in 0..300 {
        let base = &valid[case % valid.len()];
        let mut body = base.clone();
        match rng.next() % 4 {
            // Random bytes.
            0 => {
                let n = (rng.next() % 64) as usize;
                body = (0..n).map(|_| rng.next() as u8).collect();
            }
            // Flip a few bytes.
            1 => {
                for _ in 0..1 + rng.next() % 4 {
                    let i = (rng.next() as usize) % body.len();
                    body[i] = rng.next() as u8;
                }
            }
            // Cut it short.
            2 => body.truncate((rng.next() as usize) % body.len()),
            // Splice in a structural character.
            _ => {
                let i = (rng.next() as usize) % body.len();
                let c = b"{}[]\",:0-e\\"[(rng.next() % 11) as usize];
                body.insert(i, c);
            }
        }
        let path = if case % 2 == 0 {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let r = s.request("POST", path, &[], &body);
        assert!(
            r.status == 200 || (400..500).contains(&r.status),
            "case {case}: {} for {:?}: {}",
            r.status,
            String::from_utf8_lossy(&body),
            r.text()
        );
        if r.status != 200 {
            r.assert_error(r.status);
        }
    }
    s.assert_alive();
}

#[test]
fn the_time_limit_ends_streamed_and_plain_answers_with_length() {
    // A context so long that the tiny model cannot fill it within the limit.
    let mut s = Server::start(
        TINY,
        &[
            "--ctx",
            "32768",
            "--parallel",
            "2",
            "--max-request-secs",
            "0.5",
        ],
    );
    let streamed = r#"{"prompt":"a a a a","max_tokens":100000,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
    let plain = r#"{"prompt":"a a a a","max_tokens":100000,"temperature":0}"#;
    // Streamed: a normal end, finish_reason "length", usage, [DONE].
    let t0 = Instant::now();
    let r = s.post("/v1/completions", streamed);
    let took = t0.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let data = r.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c.get("error").is_none()), "{data:?}");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length", "{finish}");
    let generated = chunks[chunks.len() - 1]["usage"]["completion_tokens"]
        .as_u64()
        .unwrap();
    assert!(generated > 0 && generated < 32000, "{generated}");
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");

    // Not streamed: 200 with the text so far, not a 504.
    let r = s.post("/v1/completions", plain);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let generated = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(generated > 0 && generated < 32000, "{v}");
    assert!(!v["choices"][0]["text"].as_str().unwrap().is_empty());

    assert_eq!(s.metric("hearth_generations_time_limited_total"), 2.0);
    s.assert_alive();
}
