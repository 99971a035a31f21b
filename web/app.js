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

async function generate(e) {
  e.preventDefault();
  frames = [];
  totals = { drafts: 0, rejected: 0, revised: 0, nfe: 0 };
  $("text").textContent = "";
  $("stats").textContent = "";
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
  if (body.policy !== "vanilla") body.threshold = thr;
  if ($("revise").checked) body.revise = true;
  const t0 = performance.now();
  const res = await fetch("/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!res.ok) {
    $("stats").textContent = "error: " + (await res.text());
    return;
  }
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

$("form").addEventListener("submit", generate);
$("scrub").addEventListener("input", () => draw(Number($("scrub").value)));
$("prev").addEventListener("click", () => draw(Math.max(0, Number($("scrub").value) - 1)));
$("next").addEventListener("click", () => draw(Math.min(frames.length - 1, Number($("scrub").value) + 1)));
$("play").addEventListener("click", play);
