//! Unit tests on a tiny hand-made vocabulary.

use super::*;

/// Control/user-defined/byte tokens first, then normal pieces with scores
/// chosen so that the expected merges are unambiguous.
fn tiny_vocab(add_space_prefix: bool) -> Vocab {
    let mut tokens: Vec<String> = vec![
        "<pad>".into(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
        "<start_of_turn>".into(),
        "<end_of_turn>".into(),
        "\n".into(),
        "<b>".into(),
    ];
    let mut types = vec![3, 3, 3, 2, 3, 3, 4, 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let normal: &[(&str, f32)] = &[
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("w", -2.0),
        ("r", -2.0),
        ("d", -2.0),
        ("a", -2.0),
        ("b", -2.0),
        ("c", -2.0),
        ("<", -3.0),
        (">", -3.0),
        ("s", -3.0),
        ("t", -3.0),
        ("he", -1.5),
        ("ll", -1.4),
        ("llo", -1.3),
        ("hello", -1.0),
        ("▁hello", -0.5),
        ("▁w", -1.6),
        ("or", -1.6),
        ("ld", -1.6),
        ("orld", -1.5),
        ("▁world", -0.6),
        // Equal scores: the leftmost pair must win.
        ("ab", -1.0),
        ("bc", -1.0),
        ("xy", -1.0),
        ("y", -2.0),
        ("z", -2.0),
        ("yz", 0.5),
        ("x", -2.0),
    ];
    let mut scores = vec![-1000.0; tokens.len()];
    for (t, s) in normal {
        tokens.push((*t).into());
        types.push(1);
        scores.push(*s);
    }
    let mut v = Vocab::new(tokens.iter().collect(), Some(&scores), Some(&types)).unwrap();
    v.bos_id = Some(2);
    v.eos_id = Some(1);
    v.unk_id = Some(3);
    v.pad_id = Some(0);
    v.add_space_prefix = add_space_prefix;
    v
}

fn tiny() -> Tokenizer {
    Tokenizer::new(tiny_vocab(false)).unwrap()
}

fn pieces(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&i| t.token_text(i).unwrap().to_string())
        .collect()
}

#[test]
fn merges_by_score() {
    let t = tiny();
    let ids = t.encode("hello world", false, true);
    assert_eq!(pieces(&t, &ids), ["hello", "▁world"]);
    let ids = t.encode("hello world", true, true);
    assert_eq!(ids[0], 2);
    assert_eq!(t.decode(&ids, false), "hello world");
}

#[test]
fn ties_go_left_and_high_scores_win() {
    let t = tiny();
    assert_eq!(pieces(&t, &t.encode("abc", false, false)), ["ab", "c"]);
    // "yz" outscores "xy" although "xy" is further left.
    assert_eq!(pieces(&t, &t.encode("xyz", false, false)), ["x", "yz"]);
}

#[test]
fn byte_fallback_for_unknown_characters() {
    let t = tiny();
    let ids = t.encode("hé", false, false);
    assert_eq!(pieces(&t, &ids), ["h", "<0xC3>", "<0xA9>"]);
    assert_eq!(t.decode(&ids, false), "hé");
    let ids = t.encode("🍕", false, false);
    assert_eq!(ids.len(), 4);
    assert_eq!(t.decode(&ids, false), "🍕");
}

#[test]
fn special_tokens_parsed_only_when_asked() {
    let t = tiny();
    let text = "<start_of_turn>hello<end_of_turn>";
    let on = t.encode(text, false, true);
    assert_eq!(
        pieces(&t, &on),
        ["<start_of_turn>", "hello", "<end_of_turn>"]
    );
    let off = t.encode(text, false, false);
    assert!(!off.contains(&4) && !off.contains(&5));
    // As plain text it still round-trips.
    assert_eq!(t.decode(&off, false), text);
    // Control tokens render only on request.
    assert_eq!(t.decode(&on, false), "hello");
    assert_eq!(t.decode(&on, true), text);
}

#[test]
fn user_defined_tokens_match_even_without_parse_special() {
    let t = tiny();
    for parse in [false, true] {
        let ids = t.encode("hello\n<b>hello", false, parse);
        assert_eq!(pieces(&t, &ids), ["hello", "\n", "<b>", "hello"]);
        assert_eq!(t.decode(&ids, false), "hello\n<b>hello");
    }
}

#[test]
fn space_prefix_added_and_removed() {
    let t = Tokenizer::new(tiny_vocab(true)).unwrap();
    let ids = t.encode("hello", false, true);
    assert_eq!(pieces(&t, &ids), ["▁hello"]);
    assert_eq!(t.decode(&ids, false), "hello");
    // After a special token the prefix is added again, as llama.cpp does.
    let ids = t.encode("<start_of_turn>hello", false, true);
    assert_eq!(pieces(&t, &ids), ["<start_of_turn>", "▁hello"]);
}

#[test]
fn empty_text() {
    let t = tiny();
    assert!(t.encode("", false, true).is_empty());
    assert_eq!(t.encode("", true, true), [2]);
    assert_eq!(t.decode(&[], true), "");
}

#[test]
fn stream_decoder_waits_for_whole_characters() {
    let t = tiny();
    let ids = t.encode("hé🍕", false, false);
    let mut d = StreamDecoder::new(false);
    let outs: Vec<String> = ids.iter().map(|&id| d.push(&t, id)).collect();
    assert_eq!(outs, ["h", "", "é", "", "", "", "🍕"]);
    assert!(!d.has_pending());
    assert_eq!(d.finish(), "");
}

#[test]
fn stream_decoder_replaces_garbage_and_flushes() {
    let t = tiny();
    let byte = |b: u8| t.token_id(&format!("<0x{b:02X}>")).unwrap();
    let mut d = StreamDecoder::new(false);
    // A lone continuation byte can never become valid: replaced at once.
    assert_eq!(d.push(&t, byte(0xA9)), "\u{FFFD}");
    // A lead byte waits; the stream ends before its continuation.
    assert_eq!(d.push(&t, byte(0xE2)), "");
    assert!(d.has_pending());
    assert_eq!(d.finish(), "\u{FFFD}");
    // A lead byte followed by a normal token: the lead byte is garbage.
    assert_eq!(d.push(&t, byte(0xC3)), "");
    assert_eq!(d.push(&t, t.token_id("hello").unwrap()), "\u{FFFD}hello");
}

#[test]
fn invalid_ids_are_harmless() {
    let t = tiny();
    let n = t.vocab_size() as u32;
    assert_eq!(t.token_text(n), None);
    assert_eq!(t.token_type(u32::MAX), None);
    assert!(t.token_bytes(n, true).is_empty());
    assert_eq!(
        t.decode(&[n, u32::MAX, t.token_id("hello").unwrap()], true),
        "hello"
    );
    let mut d = StreamDecoder::new(true);
    assert_eq!(d.push(&t, u32::MAX), "");
    assert!(!t.is_eog(u32::MAX));
}

#[test]
fn invalid_special_ids_are_rejected() {
    let mut v = tiny_vocab(false);
    v.eos_id = Some(1_000_000);
    let err = Tokenizer::new(v).unwrap_err().to_string();
    assert!(err.contains("eos_id"), "{err}");
}

#[test]
fn ids_helpers() {
    let t = tiny();
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_id(), Some(1));
    assert!(t.is_eog(1));
    assert!(t.is_eog(5), "<end_of_turn> ends a generation");
    assert!(!t.is_eog(4));
    assert_eq!(t.token_id("<end_of_turn>"), Some(5));
    assert_eq!(t.token_id("nope"), None);
    assert_eq!(t.token_type(7), Some(TokenType::UserDefined));
}

/// Gemma 3's Hugging Face chat template (the part that handles text).
const GEMMA3_TEMPLATE: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"#;

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("Be brief."),
        ChatMessage::user("Hi there "),
        ChatMessage::assistant("Hello!"),
        ChatMessage::user("How are you?"),
    ]
}

#[test]
fn builtin_gemma_format() {
    let t = ChatTemplate::gemma("<bos>");
    assert!(t.is_builtin());
    let s = t.render(&conversation(), true).unwrap();
    assert_eq!(
        s,
        "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n\
         <start_of_turn>model\nHello!<end_of_turn>\n\
         <start_of_turn>user\nHow are you?<end_of_turn>\n\
         <start_of_turn>model\n"
    );
    let s = t.render(&[ChatMessage::user("x")], false).unwrap();
    assert_eq!(s, "<bos><start_of_turn>user\nx<end_of_turn>\n");
    // A lone system message is kept, not dropped.
    let s = t.render(&[ChatMessage::system("rules")], true).unwrap();
    assert_eq!(
        s,
        "<bos><start_of_turn>user\nrules\n\n<end_of_turn>\n<start_of_turn>model\n"
    );
}

/// The expected text is what Gemma 4's own chat template (llama.cpp's
/// models/templates/google-gemma-4-31B-it.jinja) renders for this
/// conversation through our minijinja set-up.
#[test]
fn builtin_gemma4_format() {
    let t = ChatTemplate::gemma4("<bos>");
    assert!(t.is_builtin());
    let s = t.render(&conversation(), true).unwrap();
    assert_eq!(
        s,
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi there<turn|>\n\
         <|turn>model\nHello!<turn|>\n<|turn>user\nHow are you?<turn|>\n\
         <|turn>model\n<|channel>thought\n<channel|>"
    );
}

/// Thinking on: `<|think|>` opens the system turn (a system turn is added
/// when there is none) and the model's turn is left for it to open its
/// thought channel, as Gemma 4's template does with `enable_thinking`.
#[test]
fn builtin_gemma4_thinking_switch() {
    let t = ChatTemplate::gemma4("<bos>");
    assert!(t.supports_thinking());
    assert!(!ChatTemplate::gemma("<bos>").supports_thinking());
    let s = t
        .render_with(&conversation(), &ChatOptions::reply(true))
        .unwrap();
    assert!(
        s.starts_with("<bos><|turn>system\n<|think|>\nBe brief.<turn|>\n"),
        "{s}"
    );
    assert!(
        s.ends_with("<|turn>user\nHow are you?<turn|>\n<|turn>model\n"),
        "{s}"
    );
    let s = t
        .render_with(&conversation()[1..], &ChatOptions::reply(true))
        .unwrap();
    assert!(
        s.starts_with("<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nHi there"),
        "{s}"
    );
    assert_eq!(
        t.render_with(&conversation(), &ChatOptions::reply(false))
            .unwrap(),
        t.render(&conversation(), true).unwrap()
    );
    let j = ChatTemplate::jinja("{% if enable_thinking %}T{% endif %}", "", "").unwrap();
    assert!(j.supports_thinking());
    assert_eq!(
        j.render_with(
            &[],
            &ChatOptions {
                thinking: true,
                ..ChatOptions::default()
            }
        )
        .unwrap(),
        "T"
    );
    assert_eq!(j.render(&[], false).unwrap(), "");
}

#[test]
fn jinja_template_matches_builtin() {
    let j = ChatTemplate::jinja(GEMMA3_TEMPLATE, "<bos>", "<eos>").unwrap();
    assert!(!j.is_builtin());
    let b = ChatTemplate::gemma("<bos>");
    for gen in [false, true] {
        let msgs = conversation();
        assert_eq!(j.render(&msgs, gen).unwrap(), b.render(&msgs, gen).unwrap());
        let msgs = &conversation()[1..];
        assert_eq!(j.render(msgs, gen).unwrap(), b.render(msgs, gen).unwrap());
    }
}

#[test]
fn jinja_raise_exception_is_an_error() {
    let j = ChatTemplate::jinja(GEMMA3_TEMPLATE, "<bos>", "<eos>").unwrap();
    let bad = [ChatMessage::assistant("first"), ChatMessage::user("x")];
    let err = j.render(&bad, true).unwrap_err().to_string();
    assert!(err.contains("must alternate"), "{err}");
}

#[test]
fn jinja_python_methods_and_variables() {
    let src = "{{ bos_token }}{% for m in messages %}[{{ m.role.upper() }}:{{ m.content.strip() }}]{% endfor %}\
               {% if add_generation_prompt %}{{ eos_token }}{% endif %}";
    let j = ChatTemplate::jinja(src, "<s>", "</s>").unwrap();
    let s = j.render(&[ChatMessage::user("  hi  ")], true).unwrap();
    assert_eq!(s, "<s>[USER:hi]</s>");
}

#[test]
fn broken_template_falls_back_to_builtin() {
    assert!(ChatTemplate::jinja("{% for %}", "<bos>", "").is_err());
    let t = ChatTemplate::new(Some("{% for %}"), "<bos>", "<eos>");
    assert!(t.is_builtin());
    assert!(ChatTemplate::new(None, "<bos>", "<eos>").is_builtin());
}

#[test]
fn encode_chat_adds_bos_once() {
    let t = tiny();
    let tmpl = t.chat_template();
    assert!(tmpl.is_builtin());
    let ids = t
        .encode_chat(&tmpl, &[ChatMessage::user("hello")], true)
        .unwrap();
    assert_eq!(
        pieces(&t, &ids),
        [
            "<bos>",
            "<start_of_turn>",
            "<0x75>",
            "s",
            "e",
            "r",
            "\n",
            "hello",
            "<end_of_turn>",
            "\n",
            "<start_of_turn>",
            "<0x6D>",
            "o",
            "d",
            "e",
            "l",
            "\n"
        ]
    );
    // A template that writes no BOS gets one from the tokenizer.
    let plain = ChatTemplate::jinja("{{ messages[0].content }}", "<bos>", "").unwrap();
    let ids = t
        .encode_chat(&plain, &[ChatMessage::user("hello")], false)
        .unwrap();
    assert_eq!(pieces(&t, &ids), ["<bos>", "hello"]);
}

#[test]
fn chat_message_serde() {
    let m: ChatMessage = serde_json::from_str(r#"{"role":"user","content":"hi"}"#).unwrap();
    assert_eq!(m, ChatMessage::user("hi"));
}

fn gguf_with(edit: impl FnOnce(&mut gguf::GgufWriter)) -> Result<Tokenizer, TokenizerError> {
    use gguf::{MetaArray, MetaValue};
    let v = tiny_vocab(false);
    let tokens: Vec<String> = (0..v.len() as u32)
        .map(|i| v.text(i).unwrap().to_string())
        .collect();
    let scores: Vec<f32> = (0..v.len() as u32).map(|i| v.score(i).unwrap()).collect();
    let types: Vec<i32> = (0..v.len() as u32)
        .map(|i| v.token_type(i).unwrap() as i32)
        .collect();
    let mut w = gguf::GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()))
        .set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(tokens.into())),
        )
        .set(
            "tokenizer.ggml.scores",
            MetaValue::Array(MetaArray::F32(scores)),
        )
        .set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(types)),
        )
        .set("tokenizer.ggml.bos_token_id", MetaValue::U32(2))
        .set("tokenizer.ggml.eos_token_id", MetaValue::U32(1))
        .set("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    edit(&mut w);
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).expect("valid gguf");
    Tokenizer::from_gguf(&file)
}

#[test]
fn from_gguf_reads_metadata() {
    let t = gguf_with(|_| {}).unwrap();
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_id(), Some(1));
    assert!(t.add_bos());
    assert!(!t.vocab().add_space_prefix);
    assert_eq!(
        pieces(&t, &t.encode("hello world", false, true)),
        ["hello", "▁world"]
    );
}

#[test]
fn from_gguf_errors_name_the_key() {
    use gguf::MetaValue;
    let mut w = gguf::GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.tokens"), "{err}");

    let err = gguf_with(|w| {
        w.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("gpt2"), "{err}");

    let err = gguf_with(|w| {
        w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(99_999));
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("tokenizer.ggml.eos_token_id"), "{err}");

    let err = gguf_with(|w| {
        w.set("tokenizer.ggml.scores", MetaValue::String("x".into()));
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("tokenizer.ggml.scores"), "{err}");

    let err = gguf_with(|w| {
        w.set(
            "tokenizer.ggml.scores",
            MetaValue::Array(gguf::MetaArray::F32(vec![0.0; 3])),
        );
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("3 scores"), "{err}");
}

proptest::proptest! {
    /// Whatever the text, encoding never panics and decoding gives it back.
    #[test]
    fn round_trip_any_text(s in "(<start_of_turn>|<end_of_turn>|<b>|<bos>|hello|world|[ \n\t]|[a-e]|\\PC){0,24}") {
        let t = tiny();
        let ids = t.encode(&s, false, true);
        proptest::prop_assert_eq!(t.decode(&ids, true), s.clone());
        let ids = t.encode(&s, false, false);
        proptest::prop_assert_eq!(t.decode(&ids, false), s.clone());
        let mut d = StreamDecoder::new(false);
        let mut streamed: String = ids.iter().map(|&id| d.push(&t, id)).collect();
        streamed.push_str(&d.finish());
        proptest::prop_assert_eq!(streamed, s);
    }

    /// Arbitrary ids, valid or not, never panic and stream like `decode`.
    #[test]
    fn any_ids_decode(ids in proptest::collection::vec(0u32..400, 0..32)) {
        let t = tiny();
        let whole = t.decode(&ids, true);
        let mut d = StreamDecoder::new(true);
        let mut streamed: String = ids.iter().map(|&id| d.push(&t, id)).collect();
        streamed.push_str(&d.finish());
        proptest::prop_assert_eq!(streamed, whole);
    }
}

#[test]
fn shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<ChatTemplate>();
    assert_send_sync::<StreamDecoder>();
}

// ---- Gemma 4 BPE ----

/// Special and byte tokens as in `tiny_vocab`, then pieces for the merges
/// below; `merges` are "LEFT RIGHT" in rank order.
fn bpe_vocab(merges: &[&str]) -> Vocab {
    let mut tokens: Vec<String> = vec![
        "<pad>".into(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
        "<|turn>".into(),
        "<turn|>".into(),
        "[tool]".into(),
    ];
    let mut types = vec![3, 3, 3, 2, 3, 3, 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for t in [
        "▁", "a", "b", "c", "d", "x", "y", "z", "h", "e", "ab", "bc", "cd", "yz", "xy", "aa",
        "aaaa", "▁a", "▁ab", "\n", "\n\n\n", " x", "q",
    ] {
        tokens.push(t.into());
        types.push(1);
    }
    let mut v = Vocab::new(tokens.iter().collect(), None, Some(&types)).unwrap();
    v.model = TokenizerModel::Gemma4;
    v.bos_id = Some(2);
    v.eos_id = Some(1);
    v.unk_id = Some(3);
    v.pad_id = Some(0);
    v.add_bos = false;
    v.add_space_prefix = false;
    v.set_merges(merges.iter().collect()).unwrap();
    v
}

const BPE_MERGES: &[&str] = &[
    "c d", "b c", "a b", "y z", "x y", "a a", "aa aa", "▁ a", "▁a b", "h e", " x q",
    // A repeated pair keeps its first rank.
    "c d", "▁ ab",
];

fn bpe() -> Tokenizer {
    Tokenizer::new(bpe_vocab(BPE_MERGES)).unwrap()
}

#[test]
fn bpe_merges_by_rank_then_leftmost() {
    let t = bpe();
    assert_eq!(t.vocab().n_merges(), BPE_MERGES.len());
    // "c d" (rank 0) beats "b c" (rank 1) although it is further right.
    assert_eq!(pieces(&t, &t.encode("bcd", false, false)), ["b", "cd"]);
    assert_eq!(pieces(&t, &t.encode("abc", false, false)), ["a", "bc"]);
    // "y z" outranks "x y".
    assert_eq!(pieces(&t, &t.encode("xyz", false, false)), ["x", "yz"]);
    // Equal ranks (the same pair twice): leftmost first.
    assert_eq!(pieces(&t, &t.encode("aaa", false, false)), ["aa", "a"]);
    assert_eq!(pieces(&t, &t.encode("aaaaa", false, false)), ["aaaa", "a"]);
    // Spaces are pieces like any other character; no prefix is added.
    assert_eq!(pieces(&t, &t.encode("ab ab", false, false)), ["ab", "▁ab"]);
    assert_eq!(
        t.decode(&t.encode(" ab ab ", false, false), false),
        " ab ab "
    );
}

#[test]
fn bpe_repeated_merge_keeps_first_rank() {
    // With "c d" re-ranked last, "b c" would win in "bcd".
    let t = bpe();
    assert_eq!(pieces(&t, &t.encode("bcd", false, false)), ["b", "cd"]);
}

#[test]
fn bpe_merge_result_outside_vocab_falls_back_to_bytes() {
    let t = bpe();
    // "h e" merges into "he", which is no token: its bytes are emitted.
    assert_eq!(
        pieces(&t, &t.encode("hee", false, false)),
        ["<0x68>", "<0x65>", "e"]
    );
    assert_eq!(t.decode(&t.encode("hee", false, false), false), "hee");
}

#[test]
fn bpe_merge_sides_may_start_with_a_space() {
    // " x q" splits after " x": the separator is the first space past byte 0.
    let v = bpe_vocab(BPE_MERGES);
    assert_eq!(v.merge(10), Some(" x q"));
    Tokenizer::new(v).unwrap();
}

#[test]
fn bpe_newline_runs() {
    let t = bpe();
    // "\n\n\n" is a token and taken whole; "\n\n" is not, so it splits.
    assert_eq!(
        pieces(&t, &t.encode("a\n\n\nb\n\nc", false, false)),
        ["a", "\n\n\n", "b", "\n", "\n", "c"]
    );
    // Merges never cross a newline: "a" and "b" stay apart.
    assert_eq!(
        pieces(&t, &t.encode("a\nb", false, false)),
        ["a", "\n", "b"]
    );
}

#[test]
fn bpe_byte_fallback_uses_only_byte_tokens() {
    let t = bpe();
    assert_eq!(
        pieces(&t, &t.encode("é", false, false)),
        ["<0xC3>", "<0xA9>"]
    );
    // Without byte tokens an unknown character is dropped, not <unk>
    // (llama.cpp's BPE), while SentencePiece would give <unk>.
    let mut v = Vocab::new(
        ["<unk>", "<bos>", "a"].into_iter().collect(),
        None,
        Some(&[2, 3, 1]),
    )
    .unwrap();
    v.model = TokenizerModel::Gemma4;
    v.unk_id = Some(0);
    let t = Tokenizer::new(v).unwrap();
    assert_eq!(t.encode("aéa", false, false), [2, 2]);
}

#[test]
fn bpe_specials_and_bos() {
    let t = bpe();
    // Gemma 4 always wants BOS, whatever the vocabulary says.
    assert!(t.add_bos());
    let ids = t.encode("<|turn>ab<turn|>[tool]", true, true);
    assert_eq!(
        pieces(&t, &ids),
        ["<bos>", "<|turn>", "ab", "<turn|>", "[tool]"]
    );
    // Without parse_special the control tokens are text, user-defined not.
    let ids = t.encode("<turn|>[tool]", false, false);
    assert!(!ids.contains(&5));
    assert_eq!(*ids.last().unwrap(), 6);
    assert_eq!(t.decode(&ids, false), "<turn|>[tool]");
    assert!(t.is_eog(5), "<turn|> ends a Gemma 4 turn");
    assert!(!t.is_eog(4));
}

#[test]
fn bpe_bad_merges_are_errors() {
    let bad = |merges: &[&str]| {
        let v = bpe_vocab(merges);
        Tokenizer::new(v).unwrap_err().to_string()
    };
    let err = bad(&["a b", "ab"]);
    assert!(err.contains("merge 1") && err.contains("no space"), "{err}");
    let err = bad(&[" ab"]);
    assert!(err.contains("no space"), "{err}");
    let err = bad(&[""]);
    assert!(err.contains("merge 0"), "{err}");
    let err = bad(&["a nope"]);
    assert!(err.contains("\"nope\" is not in the vocabulary"), "{err}");
    let err = bad(&["a "]);
    assert!(err.contains("is not in the vocabulary"), "{err}");
    // SentencePiece ignores merges altogether.
    let mut v = bpe_vocab(&["a nope"]);
    v.model = TokenizerModel::Llama;
    Tokenizer::new(v).unwrap();
}

fn gemma4_gguf(edit: impl FnOnce(&mut gguf::GgufWriter)) -> Result<Tokenizer, TokenizerError> {
    use gguf::{MetaArray, MetaValue};
    let v = bpe_vocab(BPE_MERGES);
    let tokens: Vec<String> = (0..v.len() as u32)
        .map(|i| v.text(i).unwrap().to_string())
        .collect();
    let types: Vec<i32> = (0..v.len() as u32)
        .map(|i| v.token_type(i).unwrap() as i32)
        .collect();
    let merges: Vec<String> = BPE_MERGES.iter().map(|m| m.to_string()).collect();
    let mut w = gguf::GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("gemma4".into()))
        .set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(tokens.into())),
        )
        .set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(types)),
        )
        .set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(merges.into())),
        )
        .set("tokenizer.ggml.bos_token_id", MetaValue::U32(2))
        .set("tokenizer.ggml.eos_token_id", MetaValue::U32(1))
        .set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    edit(&mut w);
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).expect("valid gguf");
    Tokenizer::from_gguf(&file)
}

#[test]
fn gemma4_from_gguf() {
    let t = gemma4_gguf(|_| {}).unwrap();
    assert_eq!(t.vocab().model, TokenizerModel::Gemma4);
    assert!(t.add_bos(), "forced on for Gemma 4");
    assert!(!t.vocab().add_space_prefix, "BPE default");
    assert_eq!(
        pieces(&t, &t.encode("ab ab", true, true)),
        ["<bos>", "ab", "▁ab"]
    );
    assert_eq!(t.decode(&t.encode("ab ab", true, true), false), "ab ab");
}

#[test]
fn gemma4_from_gguf_errors() {
    use gguf::{MetaArray, MetaValue, StrArray};
    let err =
        |edit: &dyn Fn(&mut gguf::GgufWriter)| gemma4_gguf(|w| edit(w)).unwrap_err().to_string();
    let e = err(&|w| {
        w.set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(StrArray::from_iter(["a b", "ab"]))),
        );
    });
    assert!(
        e.contains("tokenizer.ggml.merges") && e.contains("merge 1"),
        "{e}"
    );
    let e = err(&|w| {
        w.set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(StrArray::from_iter(["a zzz"]))),
        );
    });
    assert!(
        e.contains("tokenizer.ggml.merges") && e.contains("zzz"),
        "{e}"
    );
    let e = err(&|w| {
        w.set("tokenizer.ggml.merges", MetaValue::U32(3));
    });
    assert!(e.contains("tokenizer.ggml.merges"), "{e}");
    let e = err(&|w| {
        w.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(StrArray::default())),
        );
    });
    assert!(e.contains("empty"), "{e}");
    let e = err(&|w| {
        w.set("tokenizer.ggml.model", MetaValue::String("gemma5".into()));
    });
    assert!(e.contains("gemma5") && e.contains("not supported"), "{e}");

    // A missing merges key is an error, as in llama.cpp.
    let mut w = gguf::GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("gemma4".into()))
        .set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(StrArray::from_iter(["a"]))),
        );
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).unwrap();
    let e = Tokenizer::from_gguf(&file).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.ggml.merges") && e.contains("missing"),
        "{e}"
    );
}

proptest::proptest! {
    /// Any text encodes without panicking and decodes back (U+2581 aside,
    /// which every SentencePiece-style decoder turns into a space).
    #[test]
    fn bpe_round_trip_any_text(s in "(<\\|turn>|<turn\\|>|\\[tool\\]|<bos>|ab|aa|xyz|[ \n\t]|[a-e]|\\PC){0,24}") {
        let t = bpe();
        let want = s.replace('\u{2581}', " ");
        let ids = t.encode(&s, false, true);
        proptest::prop_assert_eq!(t.decode(&ids, true), want.clone());
        let ids = t.encode(&s, true, false);
        proptest::prop_assert_eq!(ids[0], 2);
        let mut d = StreamDecoder::new(false);
        let mut streamed: String = ids[1..].iter().map(|&id| d.push(&t, id)).collect();
        streamed.push_str(&d.finish());
        proptest::prop_assert_eq!(streamed, want);
    }

    /// Whatever the merges say, building either fails cleanly or gives a
    /// tokenizer that encodes without panicking.
    #[test]
    fn bpe_any_merges_never_panic(
        merges in proptest::collection::vec("(a|b|c|ab|aa|▁| |x|\n|<0x41>|é){0,4}", 0..12),
        text in "(a|b|c|x| |\n|é){0,16}",
    ) {
        let mut v = bpe_vocab(&[]);
        v.set_merges(merges.iter().collect()).unwrap();
        if let Ok(t) = Tokenizer::new(v) {
            let _ = t.encode(&text, true, true);
        }
    }
}

/// A vocabulary with extra user-defined tokens after the tiny one's.
fn vocab_with(extra: &[&str]) -> Vocab {
    let base = tiny_vocab(false);
    let n = base.len() as u32;
    let mut tokens: Vec<String> = (0..n).map(|i| base.text(i).unwrap().to_string()).collect();
    let mut types: Vec<i32> = (0..n).map(|i| base.token_type(i).unwrap() as i32).collect();
    let mut scores: Vec<f32> = (0..n).map(|i| base.score(i).unwrap()).collect();
    for t in extra {
        tokens.push((*t).into());
        types.push(4);
        scores.push(-1000.0);
    }
    let mut v = Vocab::new(tokens.iter().collect(), Some(&scores), Some(&types)).unwrap();
    v.bos_id = Some(2);
    v.eos_id = Some(1);
    v
}

#[test]
fn end_of_sentence_ends_a_gemma3_generation_but_not_a_gemma4_one() {
    let t = Tokenizer::new(vocab_with(&["</s>"])).unwrap();
    let eos = t.token_id("</s>").unwrap();
    assert!(t.is_eog(eos), "Gemma 3 ends a generation at </s>");
    let t4 = Tokenizer::new(vocab_with(&["</s>", "<|tool_response>"])).unwrap();
    assert!(
        !t4.is_eog(t4.token_id("</s>").unwrap()),
        "Gemma 4 writes </s> as text"
    );
    assert!(t4.is_eog(t4.token_id("<|tool_response>").unwrap()));
}

#[test]
fn the_templates_end_of_turn_marker_ends_a_generation() {
    // A template that closes each message with a token no list names.
    let mut v = vocab_with(&["<|close|>"]);
    v.chat_template =
        Some("{% for m in messages %}<start_of_turn>{{ m.content }}<|close|>{% endfor %}".into());
    let mut t = Tokenizer::new(v).unwrap();
    let close = t.token_id("<|close|>").unwrap();
    assert!(!t.is_eog(close));
    let template = t.chat_template();
    assert_eq!(t.add_template_eog(&template), Some(close));
    assert!(t.is_eog(close));
    // The built-in Gemma format ends turns with <end_of_turn>, already an EOG.
    let mut g = tiny();
    let gemma = ChatTemplate::gemma("<bos>");
    assert_eq!(g.add_template_eog(&gemma), g.token_id("<end_of_turn>"));
    // Plain text after the message marks nothing.
    let plain = ChatTemplate::new(
        Some("{% for m in messages %}{{ m.content }}hello{% endfor %}"),
        "",
        "",
    );
    assert_eq!(g.add_template_eog(&plain), None);
}

#[test]
fn hostile_templates_stop_at_their_bounds() {
    let msgs = conversation();
    // A loop past the step bound: stopped, naming the bound.
    let spin = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    let mut t = ChatTemplate::jinja(spin, "<bos>", "<eos>").unwrap();
    t.set_step_limit(10_000);
    let err = t.render(&msgs, true).unwrap_err().to_string();
    assert!(err.contains("more than its limit of 10000 steps"), "{err}");
    // Output past MAX_RENDER_BYTES: stopped, whatever the step bound.
    let flood = "{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}";
    let mut t = ChatTemplate::jinja(flood, "<bos>", "<eos>").unwrap();
    t.set_step_limit(1 << 40);
    let err = t.render(&msgs, true).unwrap_err().to_string();
    assert!(err.contains("wrote more than"), "{err}");
    // Recursion past minijinja's limit.
    let deep = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let t = ChatTemplate::jinja(deep, "<bos>", "<eos>").unwrap();
    let err = t.render(&msgs, true).unwrap_err().to_string();
    assert!(err.contains("recursion"), "{err}");
    // A real template stays well inside the default bound.
    let gemma = "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}";
    let t = ChatTemplate::jinja(gemma, "<bos>", "<eos>").unwrap();
    let many: Vec<ChatMessage> = (0..2000)
        .map(|i| ChatMessage::user(format!("turn {i}")))
        .collect();
    assert!(t.render(&many, true).is_ok());
}
