"use strict";
// Everything the model writes is untrusted: it reaches the page only as
// text nodes and as elements this script builds, never through innerHTML.
const $ = (id) => document.getElementById(id);
const STORE = "hearth.conversations.v1", CURRENT = "hearth.current", KEY = "hearth.key", THEME = "hearth.theme";
const GUARDS = ["calc", "logic", "verify", "persona", "clean", "qualifiers"];
let convs = load(), current = localStorage.getItem(CURRENT), models = [], busy = null, pending = [];

function load() {
  try { const v = JSON.parse(localStorage.getItem(STORE) || "[]"); return Array.isArray(v) ? v : []; }
  catch { return []; }
}
function save() {
  try { localStorage.setItem(STORE, JSON.stringify(convs)); }
  catch {
    // Over the browser's quota: keep the text, drop the oldest attachments.
    for (const c of convs) for (const m of c.messages) if (m.attachments && m.attachments.length) {
      m.attachments = m.attachments.map((a) => ({ kind: a.kind, name: a.name, dropped: true }));
      try { localStorage.setItem(STORE, JSON.stringify(convs)); notice("Storage is full: older attachments were removed from saved chats."); return; } catch {}
    }
    notice("Storage is full: this chat could not be saved.");
  }
  if (current) localStorage.setItem(CURRENT, current);
}
function conv() { return convs.find((c) => c.id === current); }
function notice(text) { $("notice").textContent = text || ""; }
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  if (props) for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

// ---- Markdown: a small, safe subset built from DOM nodes ----
function safeUrl(url) {
  try { const u = new URL(url, location.href); return ["http:", "https:", "mailto:"].includes(u.protocol) ? u.href : null; }
  catch { return null; }
}
// Inline markdown (code, **strong**, *em*, _em_, [links](url)) in one pass
// over the text. Each closer is found by a forward search whose answer is
// kept or that rules out every later opener of its kind, and code spans
// pair through a table of backtick runs: no text costs more than a few
// passes (a lazy regex took minutes on a line of backticks). Nesting is
// bounded too: an element's text never holds its own delimiter.
function inline(parent, text) {
  const plain = (s) => s.split("\n").forEach((part, i) => { if (i) parent.append(el("br")); if (part) parent.append(document.createTextNode(part)); });
  const word = (c) => c !== undefined && /\w/.test(c);
  const ticks = text.includes("`") ? backtickRuns(text) : null;
  let last = 0, i = 0, strongUntil = text.length, bracket = -1, urlFor = -1, urlEnd = -1;
  while (i < text.length) {
    const c = text[i], next = text[i + 1];
    let node = null, end = -1;
    if (c === "`") {
      const run = ticks.get(i);
      if (run.close < 0) { i += run.len; continue; }
      node = el("code", { text: text.slice(i + run.len, run.close) }); end = run.close + run.len;
    } else if (c === "*" && next === "*" && i < strongUntil && text[i + 2] && !"*\n".includes(text[i + 2])) {
      const close = text.indexOf("**", i + 3);
      // No closer after this opener: none after any later one either.
      if (close < 0) strongUntil = i;
      else { node = el("strong"); inline(node, text.slice(i + 2, close)); end = close + 2; }
    } else if ((c === "*" && !word(text[i - 1]) && text[i - 1] !== "*") || (c === "_" && !word(text[i - 1]))) {
      // The closer is the next `c` on the line: no two openers scan the same text.
      let j = i + 1;
      while (j < text.length && text[j] !== c && text[j] !== "\n") j++;
      if (j > i + 1 && text[j] === c && !word(text[j + 1]) && (c === "_" || text[j + 1] !== "*")) {
        node = el("em"); inline(node, text.slice(i + 1, j)); end = j + 1;
      }
    } else if (c === "[") {
      // The first `]` or line end after a run of `[` is the same for all of them.
      if (bracket <= i) { bracket = i + 1; while (bracket < text.length && text[bracket] !== "]" && text[bracket] !== "\n") bracket++; }
      if (bracket > i + 1 && text[bracket] === "]" && text[bracket + 1] === "(") {
        if (urlFor !== bracket) { urlFor = bracket; urlEnd = bracket + 2; while (urlEnd < text.length && !/[()\s]/.test(text[urlEnd])) urlEnd++; }
        if (urlEnd > bracket + 2 && text[urlEnd] === ")") {
          const href = safeUrl(text.slice(bracket + 2, urlEnd));
          // A link to anything else stays as the text it was.
          if (!href) { i = urlEnd + 1; continue; }
          node = el("a", { href, target: "_blank", rel: "noopener noreferrer nofollow", text: text.slice(i + 1, bracket) }); end = urlEnd + 1;
        }
      }
    }
    if (!node) { i++; continue; }
    plain(text.slice(last, i)); parent.append(node); i = last = end;
  }
  plain(text.slice(last));
}
// Each maximal run of backticks by its start: its length, and where the next
// run of the same length starts (-1 if none), which closes a code span.
function backtickRuns(text) {
  const runs = [], byStart = new Map(), nextOfLength = new Map();
  for (let i = text.indexOf("`"); i >= 0; i = text.indexOf("`", i)) {
    const start = i;
    while (text[i] === "`") i++;
    runs.push({ start, len: i - start, close: -1 });
  }
  for (let k = runs.length - 1; k >= 0; k--) {
    const r = runs[k];
    r.close = nextOfLength.get(r.len) ?? -1; nextOfLength.set(r.len, r.start); byStart.set(r.start, r);
  }
  return byStart;
}
const BLOCK = /^\s*(```|~~~|#{1,6}\s|>|[-*+]\s|\d+[.)]\s)/;
// Quotes nest this deep at most: a line of 100k `>` would otherwise nest
// 100k elements (and overflow the stack).
const QUOTE_DEPTH = 8;
function markdown(text, depth = 0) {
  const out = document.createDocumentFragment(), lines = text.split("\n");
  for (let i = 0; i < lines.length;) {
    const line = lines[i], fence = line.match(/^\s*(```|~~~)\s*([\w+#.-]*)/);
    if (fence) {
      const code = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) code.push(lines[i]);
      i++;
      out.append(codeBlock(code.join("\n"), fence[2]));
    } else if (!line.trim()) i++;
    else if (/^#{1,6}\s/.test(line)) {
      const h = line.match(/^(#{1,6})\s+(.*)/);
      inline(out.appendChild(el("h" + Math.min(6, h[1].length + 2))), h[2]); i++;
    } else if (/^\s*([-*+]|\d+[.)])\s/.test(line)) {
      const list = out.appendChild(el(/^\s*\d/.test(line) ? "ol" : "ul"));
      for (; i < lines.length && /^\s*([-*+]|\d+[.)])\s/.test(lines[i]); i++)
        inline(list.appendChild(el("li")), lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""));
    } else if (/^>/.test(line)) {
      const quote = [];
      for (; i < lines.length && /^>/.test(lines[i]); i++) quote.push(lines[i].replace(/^>\s?/, ""));
      const q = out.appendChild(el("blockquote"));
      if (depth + 1 < QUOTE_DEPTH) q.append(markdown(quote.join("\n"), depth + 1));
      else inline(q.appendChild(el("p")), quote.join("\n"));
    } else {
      const para = [line];
      for (i++; i < lines.length && lines[i].trim() && !BLOCK.test(lines[i]); i++) para.push(lines[i]);
      inline(out.appendChild(el("p")), para.join("\n"));
    }
  }
  return out;
}
function codeBlock(code, lang) {
  return el("div", { class: "code" },
    el("div", { class: "code-bar" }, el("span", { text: lang || "code" }),
      el("button", { type: "button", text: "Copy", "aria-label": "Copy the code", onclick: (e) => copy(code, e.target) })),
    el("pre", null, el("code", { text: code })));
}
async function copy(text, button) {
  try { await navigator.clipboard.writeText(text); }
  catch {
    // Plain http off localhost has no clipboard API.
    const t = el("textarea"); t.value = text; document.body.append(t); t.select();
    try { document.execCommand("copy"); } catch {} t.remove();
  }
  if (button) { const was = button.textContent; button.textContent = "Copied"; setTimeout(() => (button.textContent = was), 1200); }
}

// ---- Conversations ----
// The settings panel's fields, and those sent as numbers (llama.cpp's names).
const NUMBERS = ["temperature", "top_p", "dry_multiplier", "xtc_probability", "xtc_threshold", "top_n_sigma"];
const SETTINGS = ["system", ...NUMBERS, "max_tokens", "seed"];
function newConv() {
  const c = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", model: $("model").value || "",
    settings: { system: "", temperature: "", top_p: "", dry_multiplier: "", xtc_probability: "", xtc_threshold: "", top_n_sigma: "", max_tokens: "", seed: "", think: false, guard: [] }, messages: [], updated: Date.now() };
  convs.unshift(c); current = c.id; save(); render();
  $("input").focus();
}
function renderList() {
  const ul = $("convs"); ul.textContent = "";
  for (const c of convs) {
    const li = el("li", { "aria-current": String(c.id === current) });
    const title = el("button", { class: "title", type: "button", text: c.title, title: c.title,
      onclick: () => { current = c.id; save(); render(); $("side").classList.remove("open"); } });
    const rename = el("button", { class: "small", type: "button", text: "\u270e", title: "Rename", "aria-label": "Rename " + c.title, onclick: () => {
      const input = el("input", { "aria-label": "New name", value: c.title });
      const done = () => { c.title = input.value.trim() || c.title; save(); renderList(); };
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") done(); if (e.key === "Escape") renderList(); });
      input.addEventListener("blur", done);
      title.replaceWith(input); input.focus(); input.select();
    } });
    const del = el("button", { class: "small", type: "button", text: "\u2715", title: "Delete", "aria-label": "Delete " + c.title, onclick: () => {
      convs = convs.filter((x) => x.id !== c.id);
      if (current === c.id) current = convs[0] ? convs[0].id : null;
      save(); render();
    } });
    li.append(title, rename, del); ul.append(li);
  }
}
function render() {
  if (!conv()) { if (convs.length) current = convs[0].id; else return newConv(); }
  renderList(); renderSettings(); renderLog(); updateAttach();
}
function renderSettings() {
  const s = conv().settings;
  // Another conversation's model: its adapters are read again.
  if (adaptersOf !== null && adaptersOf !== conv().model) { adapters = []; adaptersOf = null; }
  renderAdapters();
  for (const k of SETTINGS) $("s-" + k).value = s[k] ?? "";
  $("s-think").checked = !!s.think;
  for (const g of GUARDS) $("g-" + g).checked = (s.guard || []).includes(g);
  if (conv().model && models.some((m) => m.id === conv().model)) $("model").value = conv().model;
  if (adaptersOf === null && models.length && (hasScales(conv()) || !$("settings").hidden)) loadAdapters();
}
// The chosen model's LoRA adapters ({id, path, scale}), read when the
// settings open or a conversation has scales set (reading them loads the
// model). A conversation keeps its scales per model: `settings.lora[model][id]`.
let adapters = [], adaptersOf = null;
function loraSet(c) { const all = (c && c.settings.lora) || {}; return all[c && c.model] || {}; }
function hasScales(c) { return Object.values(loraSet(c)).some((v) => v !== "" && v != null); }
async function loadAdapters() {
  const m = $("model").value;
  adapters = []; adaptersOf = m;
  if (m && !caps(m).includes("embedding")) {
    try { const r = await api("/lora-adapters?model=" + encodeURIComponent(m)); if (r.ok) adapters = await r.json(); } catch {}
  }
  renderAdapters();
}
function renderAdapters() {
  const box = $("adapters"), lora = loraSet(conv());
  box.hidden = !adapters.length;
  box.querySelectorAll("label").forEach((l) => l.remove());
  for (const a of adapters) {
    const name = String(a.path).split(/[\\/]/).filter(Boolean).pop() || "adapter " + a.id;
    const input = el("input", { id: "lora-" + a.id, type: "number", min: "-100", max: "100", step: "0.1", placeholder: String(a.scale) });
    input.value = lora[a.id] ?? "";
    box.append(el("label", null, name, input));
  }
}
// A conversation's adapter scales as a request's `lora` (every adapter
// listed, the server's scale where none is set), or none when none is set.
function loraField(c) {
  const set = loraSet(c);
  if (!adapters.length || adaptersOf !== c.model || !hasScales(c)) return null;
  return adapters.map((a) => ({ id: a.id, scale: set[a.id] !== "" && set[a.id] != null ? Number(set[a.id]) : a.scale }));
}
function renderLog() {
  const log = $("log"), c = conv(); log.textContent = "";
  if (!c.messages.length) log.append(el("p", { class: "empty", text: "Ask anything. Conversations stay in this browser; the model runs on the server you opened." }));
  c.messages.forEach((m, i) => log.append(messageNode(m, i, c)));
  log.scrollTop = log.scrollHeight;
}
function messageNode(m, i, c) {
  const node = el("div", { class: "msg " + m.role, "data-index": String(i) });
  node.append(el("div", { class: "who", text: m.role === "user" ? "You" : (m.model || "Assistant") }));
  const body = node.appendChild(el("div", { class: "body" }));
  fillBody(body, m);
  const tools = el("div", { class: "tools" });
  tools.append(el("button", { type: "button", text: "Copy", "aria-label": "Copy this message", onclick: (e) => copy(m.content, e.target) }));
  if (m.role === "user") tools.append(el("button", { type: "button", text: "Edit", "aria-label": "Edit and resend", onclick: () => editMessage(node, m, i) }));
  if (m.role === "assistant" && i === c.messages.length - 1 && !busy)
    tools.append(el("button", { type: "button", class: "regen", text: "Regenerate", onclick: regenerate }));
  node.append(tools);
  return node;
}
function fillBody(body, m) {
  body.textContent = "";
  for (const a of m.attachments || []) {
    if (a.dropped) body.append(el("p", { class: "stats", text: "(" + a.kind + " " + (a.name || "") + " not kept)" }));
    else if (a.kind === "image") body.append(el("img", { class: "att", src: a.data, alt: a.name || "attached image" }));
    else body.append(el("p", { class: "stats", text: "Voice note: " + (a.name || "audio") }));
  }
  if (m.thought) body.append(el("details", null, el("summary", { text: "Thinking" }), el("pre", { text: m.thought })));
  if (m.role === "user") inline(body.appendChild(el("p")), m.content);
  else body.append(markdown(m.content));
  if (m.error) body.append(el("p", { class: "err", role: "alert", text: m.error }));
  if (m.guard) body.append(el("details", null, el("summary", { text: "Guard trace" }), el("pre", { text: JSON.stringify(m.guard, null, 2) })));
  if (m.stats) body.append(el("div", { class: "stats", text: m.stats }));
}
function editMessage(node, m, i) {
  const area = el("textarea", { "aria-label": "Edit your message" }); area.value = m.content;
  const box = el("div", { class: "edit" }, area, el("div", { class: "tools" },
    el("button", { type: "button", class: "primary", text: "Send", onclick: () => {
      const c = conv(); m.content = area.value; c.messages.splice(i + 1); save(); renderLog(); generate();
    } }),
    el("button", { type: "button", text: "Cancel", onclick: renderLog })));
  node.querySelector(".body").replaceWith(box); area.focus();
}
function regenerate() {
  const c = conv();
  if (busy || !c.messages.length || c.messages[c.messages.length - 1].role !== "assistant") return;
  c.messages.pop(); save(); renderLog(); generate();
}

// ---- Models and attachments ----
function caps(id) { const m = models.find((x) => x.id === id); return (m && m.capabilities) || []; }
async function loadModels() {
  try {
    const r = await api("/v1/models");
    if (!r.ok) throw new Error(await errorText(r));
    models = (await r.json()).data || [];
  } catch (e) { notice("Cannot list the models: " + e.message); }
  const sel = $("model"), keep = (conv() && conv().model) || sel.value; sel.textContent = "";
  for (const m of models) {
    const c = m.capabilities || [], extra = c.filter((x) => x !== "completion");
    sel.append(el("option", { value: m.id, text: m.id + (extra.length ? " (" + extra.join(", ") + ")" : "") + (m.loaded ? " · loaded" : "") }));
  }
  if (models.some((m) => m.id === keep)) sel.value = keep;
  updateAttach();
}
function updateAttach() {
  const c = caps($("model").value), ok = c.includes("vision") || c.includes("audio");
  $("attach").disabled = !ok;
  $("attach-why").textContent = ok ? "" : "Attachments need a model with a vision or audio tower; " + ($("model").value || "this model") + " has neither.";
  $("send").disabled = c.includes("embedding");
  if (c.includes("embedding")) $("attach-why").textContent = $("model").value + " is an embedding model: it does not chat.";
}
function renderPending() {
  const box = $("attachments"); box.textContent = "";
  pending.forEach((a, i) => box.append(el("span", { class: "chip" }, a.kind + ": " + a.name,
    el("button", { type: "button", class: "small", text: "×", "aria-label": "Remove " + a.name, onclick: () => { pending.splice(i, 1); renderPending(); } }))));
}
function readAs(file) {
  return new Promise((ok, fail) => { const r = new FileReader(); r.onload = () => ok(r.result); r.onerror = () => fail(r.error); r.readAsDataURL(file); });
}
async function attach(file) {
  const c = caps($("model").value);
  if (file.type.startsWith("image/")) {
    if (!c.includes("vision")) return notice("The model " + $("model").value + " cannot read images.");
    // A phone photo is shrunk to what the vision tower reads (896 px)
    // before it is sent or saved.
    let data = await readAs(file);
    try {
      const img = await new Promise((ok, fail) => { const i = new Image(); i.onload = () => ok(i); i.onerror = fail; i.src = data; });
      const scale = Math.min(1, 1024 / Math.max(img.naturalWidth, img.naturalHeight));
      if (scale < 1 || file.size > 1.5e6) {
        const cv = el("canvas"); cv.width = Math.round(img.naturalWidth * scale); cv.height = Math.round(img.naturalHeight * scale);
        cv.getContext("2d").drawImage(img, 0, 0, cv.width, cv.height); data = cv.toDataURL("image/jpeg", 0.9);
      }
    } catch { return notice("That image cannot be read."); }
    pending.push({ kind: "image", name: file.name, data });
  } else if (file.type.startsWith("audio/")) {
    if (!c.includes("audio")) return notice("The model " + $("model").value + " cannot hear audio.");
    const format = /mpeg|mp3/.test(file.type) ? "mp3" : /ogg/.test(file.type) ? "ogg" : /wav/.test(file.type) ? "wav" : null;
    if (!format) return notice("Send voice notes as WAV, MP3 or OGG.");
    pending.push({ kind: "audio", name: file.name, format, data: await readAs(file) });
  } else return notice("Attach an image or a voice note.");
  notice(""); renderPending();
}

// ---- Talking to the server ----
async function api(path, body, signal) {
  for (let attempt = 0; ; attempt++) {
    const headers = { "Content-Type": "application/json" }, key = localStorage.getItem(KEY);
    if (key) headers.Authorization = "Bearer " + key;
    const r = await fetch(path, { method: body ? "POST" : "GET", headers, body: body ? JSON.stringify(body) : undefined, signal });
    if (r.status !== 401 || attempt) return r;
    if (!(await askKey())) return r;
  }
}
function askKey() {
  return new Promise((done) => {
    const d = $("key-dialog"); $("key-input").value = localStorage.getItem(KEY) || "";
    const finish = (ok) => { d.close(); $("key-save").onclick = $("key-cancel").onclick = null; done(ok); };
    $("key-save").onclick = () => { localStorage.setItem(KEY, $("key-input").value.trim()); finish(true); };
    $("key-cancel").onclick = () => finish(false);
    d.showModal(); $("key-input").focus();
  });
}
async function errorText(r) {
  try { const j = await r.json(); return (j.error && (j.error.message || j.error)) || r.statusText; } catch { return r.status + " " + r.statusText; }
}
function requestBody(c) {
  const s = c.settings, messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of c.messages) {
    if (m.error && !m.content) continue;
    const kept = (m.attachments || []).filter((a) => !a.dropped);
    if (!kept.length) { messages.push({ role: m.role, content: m.content }); continue; }
    const parts = [{ type: "text", text: m.content }];
    for (const a of kept) parts.push(a.kind === "image" ? { type: "image_url", image_url: { url: a.data } }
      : { type: "input_audio", input_audio: { data: a.data.slice(a.data.indexOf(",") + 1), format: a.format } });
    messages.push({ role: m.role, content: parts });
  }
  const body = { model: c.model, messages, stream: true, stream_options: { include_usage: true } };
  for (const k of NUMBERS) if (s[k] !== "" && s[k] != null) body[k] = Number(s[k]);
  for (const k of ["max_tokens", "seed"]) if (s[k] !== "" && s[k] != null) body[k] = parseInt(s[k], 10);
  if (s.think) body.think = true;
  if ((s.guard || []).length) body.guard = s.guard.join(",");
  const lora = loraField(c);
  if (lora) body.lora = lora;
  return body;
}
function send() {
  const text = $("input").value;
  if (busy || (!text.trim() && !pending.length)) return;
  const c = conv();
  c.model = $("model").value;
  c.messages.push({ role: "user", content: text, attachments: pending });
  if (c.title === "New chat") c.title = (text.trim() || pending[0].name).slice(0, 48);
  pending = []; renderPending(); $("input").value = ""; autosize();
  save(); renderList(); renderLog(); generate();
}
async function generate() {
  const c = conv(), m = { role: "assistant", content: "", model: c.model || $("model").value };
  c.model = m.model;
  const body = requestBody(c);
  c.messages.push(m); c.updated = Date.now();
  const log = $("log"); log.querySelector(".empty")?.remove();
  let node = messageNode(m, c.messages.length - 1, c); log.append(node);
  const controller = new AbortController(); busy = controller; setBusy(true);
  const started = performance.now(); let first = null, usage = null, timings = null, drawn = false;
  // Each draw renders the whole reply again, so a long reply is drawn less
  // often: the wait after a draw is four times what it took, which keeps
  // drawing under a fifth of the page's time however long the reply grows.
  let nearBottom = true, nextDraw = 0;
  const draw = () => {
    const began = performance.now();
    drawn = false; fillBody(node.querySelector(".body"), m); if (nearBottom) log.scrollTop = log.scrollHeight;
    const now = performance.now(); nextDraw = now + 4 * (now - began);
  };
  const schedule = () => setTimeout(() => requestAnimationFrame(draw), Math.max(0, nextDraw - performance.now()));
  try {
    const r = await api("/v1/chat/completions", body, controller.signal);
    if (!r.ok) throw new Error(await errorText(r));
    const reader = r.body.getReader(), dec = new TextDecoder(); let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut); buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          let j; try { j = JSON.parse(data); } catch { continue; }
          if (j.error) throw new Error(j.error.message || String(j.error));
          const d = j.choices && j.choices[0] && j.choices[0].delta;
          if (d && (d.content || d.reasoning_content)) { first = first || performance.now(); m.content += d.content || ""; m.thought = (m.thought || "") + (d.reasoning_content || ""); }
          if (j.guard) m.guard = j.guard;
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          if (!drawn) { drawn = true; nearBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80; schedule(); }
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") m.stopped = true; else m.error = e.message || String(e);
  }
  const secs = first ? (performance.now() - first) / 1000 : 0;
  const parts = [];
  if (usage) parts.push(usage.prompt_tokens + " prompt tokens", usage.completion_tokens + " reply tokens");
  const rate = timings && timings.predicted_per_second ? timings.predicted_per_second : (usage && secs > 0 ? usage.completion_tokens / secs : 0);
  if (rate) parts.push(rate.toFixed(1) + " tokens/s");
  if (m.stopped) parts.push("stopped");
  if (first) parts.push("first token after " + ((first - started) / 1000).toFixed(2) + " s");
  m.stats = parts.join(" · ");
  busy = null; setBusy(false); save(); renderLog();
  if (models.find((x) => x.id === m.model && !x.loaded)) loadModels();
}
function setBusy(on) {
  $("send").hidden = on; $("stop").hidden = !on;
  document.querySelectorAll(".regen").forEach((b) => (b.disabled = on));
}
function stop() { if (busy) busy.abort(); }
function autosize() { const t = $("input"); t.style.height = "auto"; t.style.height = Math.min(t.scrollHeight, innerHeight * 0.4) + "px"; }
function download(name, value) {
  const a = el("a", { href: URL.createObjectURL(new Blob([JSON.stringify(value, null, 2)], { type: "application/json" })), download: name });
  document.body.append(a); a.click(); a.remove();
}
function applyTheme() {
  const t = localStorage.getItem(THEME) || "auto";
  if (t === "auto") delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  $("theme").textContent = "Theme: " + t;
}

// ---- Wiring ----
for (const g of GUARDS) $("guards").append(el("label", null, el("input", { type: "checkbox", id: "g-" + g }), " " + g));
$("new").onclick = newConv;
$("send").onclick = send;
$("stop").onclick = stop;
$("attach").onclick = () => $("file").click();
$("file").onchange = (e) => { for (const f of e.target.files) attach(f); e.target.value = ""; };
$("model").onchange = () => {
  conv().model = $("model").value; save(); updateAttach();
  adapters = []; renderAdapters();
  if (!$("settings").hidden || hasScales(conv())) loadAdapters();
};
$("input").addEventListener("input", autosize);
$("input").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); } });
document.addEventListener("keydown", (e) => { if (e.key === "Escape" && busy) { e.preventDefault(); stop(); } });
$("settings-btn").onclick = () => {
  const s = $("settings"); s.hidden = !s.hidden; $("settings-btn").setAttribute("aria-expanded", String(!s.hidden));
  if (!s.hidden) loadAdapters();
};
$("settings").addEventListener("input", () => {
  const s = conv().settings;
  for (const k of SETTINGS) s[k] = $("s-" + k).value;
  s.think = $("s-think").checked; s.guard = GUARDS.filter((g) => $("g-" + g).checked);
  // Scales change only while the adapters they are for are shown.
  if (adapters.length) {
    s.lora = s.lora || {};
    s.lora[conv().model] = Object.fromEntries(adapters.map((a) => [a.id, $("lora-" + a.id).value]));
  }
  save();
});
$("export").onclick = () => download("hearth-" + conv().title.replace(/[^\w-]+/g, "_").slice(0, 40) + ".json", conv());
$("export-all").onclick = () => download("hearth-conversations.json", convs);
$("theme").onclick = () => { const order = ["auto", "light", "dark"], t = localStorage.getItem(THEME) || "auto"; localStorage.setItem(THEME, order[(order.indexOf(t) + 1) % 3]); applyTheme(); };
$("key-btn").onclick = () => askKey().then(loadModels);
$("open-side").onclick = () => { $("side").classList.add("open"); $("open-side").setAttribute("aria-expanded", "true"); $("new").focus(); };
$("close-side").onclick = () => { $("side").classList.remove("open"); $("open-side").setAttribute("aria-expanded", "false"); };
applyTheme();
render();
loadModels().then(() => {
  if (conv() && !conv().model) conv().model = $("model").value;
  // A conversation with scales set reads its adapters here, so its first
  // message sends them.
  render();
});
