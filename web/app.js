// The llada-server page: sends a streaming completion with diffusion events and redraws the
// canvas from them; every step is kept, so the replay control can step through or play them.
"use strict";
const $ = (id) => document.getElementById(id);
let frames = [];  // per step: [{text, state, changed}] for every generated position
let timer = null;

function draw(k) {
  const f = frames[k];
  if (!f) return;
  const c = $("canvas");
  c.textContent = "";
  for (const cell of f) {
    const s = document.createElement("span");
    s.className = cell.state + (cell.changed ? " changed" : "");
    s.textContent = cell.state === "masked" ? "\u2591" : (cell.text === "" ? "\u00b7" : cell.text);
    c.appendChild(s);
  }
  $("scrub").value = k;
  $("stepno").textContent = `step ${k + 1} / ${frames.length}`;
}

let totals = { drafts: 0, rejected: 0, revised: 0, nfe: 0 };

function onEvent(ev) {
  totals.drafts += ev.drafts_accepted || 0;
  totals.rejected += ev.drafts_rejected || 0;
  totals.revised += ev.revised || 0;
  totals.nfe = ev.nfe || totals.nfe;
  const prev = frames.length ? frames[frames.length - 1] : [];
  const f = prev.map((c) => ({ text: c.text, state: c.state, changed: false }));
  for (const ch of ev.changes) {
    while (f.length <= ch.i) f.push({ text: "", state: "masked", changed: false });
    f[ch.i] = { text: ch.text, state: ch.state, changed: true };
  }
  frames.push(f);
  $("scrub").max = frames.length - 1;
  draw(frames.length - 1);
}

// The API key (llada-server --api-key), kept in this browser; sent with every request.
function headers(extra) {
  const h = Object.assign({}, extra || {});
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

// The error text of a failed answer: the message of {"error": {"message"}}, else the body.
async function errorText(res) {
  const body = await res.text();
  try { return `${res.status}: ${JSON.parse(body).error.message}`; } catch (_) { return `${res.status}: ${body}`; }
}

function showError(msg) {
  $("stats").textContent = "error " + msg;
  $("stats").classList.add("error");
  document.body.dataset.done = "1";
}

// The policies that take a commit threshold (the others refuse one).
const PARALLEL = ["dual-cache", "threshold", "need", "mbsd", "prefix-cache", "pipeline"];

// The server's defaults: its policy (ar for an autoregressive model) and threshold.
async function loadProps() {
  try {
    const res = await fetch("/props", { headers: headers() });
    if (!res.ok) { if (res.status === 401) showError(await errorText(res)); return; }
    const p = await res.json();
    const s = p.default_generation_settings || {};
    const sel = $("policy");
    if (s.policy && ![...sel.options].some((o) => o.value === s.policy)) {
      const o = document.createElement("option");
      o.textContent = s.policy;
      sel.appendChild(o);
    }
    if (s.policy) sel.value = s.policy;
    if (s.threshold) $("threshold").value = s.threshold;
  } catch (err) {
    showError("the server did not answer: " + err);
  }
}

async function generate(e) {
  e.preventDefault();
  frames = [];
  totals = { drafts: 0, rejected: 0, revised: 0, nfe: 0 };
  $("text").textContent = "";
  $("stats").textContent = "";
  $("stats").classList.remove("error");
  delete document.body.dataset.done;
  const body = {
    prompt: $("prompt").value,
    max_tokens: Number($("max_tokens").value),
    policy: $("policy").value,
    temperature: Number($("temperature").value),
    seed: Number($("seed").value),
    stream: true,
    diffusion_events: true,
  };
  const thr = Number($("threshold").value);
  if (PARALLEL.includes(body.policy)) body.threshold = thr;
  if ($("revise").checked) body.revise = true;
  const t0 = performance.now();
  let res;
  try {
    res = await fetch("/v1/completions", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
    });
  } catch (err) {
    return showError("the server did not answer: " + err);
  }
  if (!res.ok) return showError(await errorText(res));
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      let name = null, data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        if (line.startsWith("data: ")) data = line.slice(6);
      }
      if (data === "[DONE]") continue;
      const j = JSON.parse(data);
      if (j.error) return showError(j.error.message || JSON.stringify(j.error));
      if (name === "llada.step") onEvent(j);
      else if (j.choices) text += j.choices[0].text || "";
    }
  }
  const ms = performance.now() - t0;
  $("text").textContent = text;
  $("stats").textContent =
    `steps ${frames.length}   NFE ${totals.nfe}   wall ${ms.toFixed(1)} ms   ` +
    `${(text.length / (ms / 1000)).toFixed(0)} chars/s   drafts accepted ${totals.drafts} ` +
    `(rejected ${totals.rejected})   revisions ${totals.revised}   policy ${body.policy}`;
  const li = document.createElement("li");
  li.textContent = `${body.prompt} -> ${text}`;
  $("history").appendChild(li);
  document.body.dataset.done = "1";
}

function play() {
  if (timer) { clearInterval(timer); timer = null; $("play").textContent = "play"; return; }
  let k = 0;
  $("play").textContent = "stop";
  timer = setInterval(() => {
    draw(k++);
    if (k >= frames.length) { clearInterval(timer); timer = null; $("play").textContent = "play"; }
  }, Number($("speed").value));
}

$("api_key").value = localStorage.getItem("llada.api_key") || "";
$("api_key").addEventListener("change", () => { localStorage.setItem("llada.api_key", $("api_key").value); loadProps(); });
$("form").addEventListener("submit", generate);
loadProps();
$("scrub").addEventListener("input", () => draw(Number($("scrub").value)));
$("prev").addEventListener("click", () => draw(Math.max(0, Number($("scrub").value) - 1)));
$("next").addEventListener("click", () => draw(Math.min(frames.length - 1, Number($("scrub").value) + 1)));
$("play").addEventListener("click", play);
