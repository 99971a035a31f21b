// llada-server through OpenAI's official Node client (npm's `openai`, installed by
// scripts/install-deps.sh --web into ~/.cache/llada.cpp/npm): a completion and a streamed
// completion, a chat and a streamed chat give the same text as a plain HTTP request for the same
// seed, and usage is filled; the fields the client sends beside (max_completion_tokens, role
// developer, nulls, logprobs with top_logprobs, streamed too, stream_options.include_usage) are taken.
// Exits 77 (skipped) with a message when the client is not installed.
//
//     node tests/web/openai_client_test.mjs BIN_DIR MODEL
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";

const [binDir, model] = process.argv.slice(2);
const pkg = path.join(process.env.LLADA_NPM_DIR || path.join(homedir(), ".cache/llada.cpp/npm"),
                      "node_modules/openai/index.mjs");
if (!existsSync(pkg)) {
  console.log(`skipped: the openai npm client is not installed (${pkg}; scripts/install-deps.sh --web)`);
  process.exit(77);
}
const { default: OpenAI } = await import(pkg);
const srv = spawn(path.join(binDir, "llada-server"),
                  ["-m", model, "--port", "0", "-t", "1", "--max-gen", "32", "--block", "8"],
                  { stdio: ["ignore", "pipe", "ignore"] });
const port = await new Promise((resolve) => {
  srv.stdout.on("data", (d) => { const m = /listening (\d+)/.exec(String(d)); if (m) resolve(Number(m[1])); });
});
let ok = true;
const fail = (msg) => { console.log("FAIL: " + msg); ok = false; };
try {
  const base = `http://127.0.0.1:${port}`;
  const prompt = "sort 56 44 46 59 52 58:";
  const plain = await (await fetch(base + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: 32, seed: 4, temperature: 1.0 }),
  })).json();
  const want = plain.choices[0].text;
  const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused" });
  const c = await client.completions.create({ model: "tiny-llada-m", prompt, max_tokens: 32, seed: 4, temperature: 1.0 });
  if (c.choices[0].text !== want) fail(`client text ${JSON.stringify(c.choices[0].text)} != ${JSON.stringify(want)}`);
  if (!(c.usage && c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens)) fail("usage");
  const stream = await client.completions.create({ model: "tiny-llada-m", prompt, max_tokens: 32, seed: 4,
                                                   temperature: 1.0, stream: true });
  let text = "", chunks = 0;
  for await (const ch of stream) { text += ch.choices[0].text || ""; ++chunks; }
  if (text !== want) fail(`streamed text ${JSON.stringify(text)} != ${JSON.stringify(want)}`);
  if (chunks < 2) fail(`only ${chunks} chunks`);
  // Chat: the shipped model's plain format makes the user's message the prompt.
  const chat = await client.chat.completions.create({ model: "tiny-llada-m", messages: [{ role: "user", content: prompt }],
                                                      max_tokens: 32, seed: 4, temperature: 1.0 });
  if (chat.choices[0].message.content !== want) fail(`chat content ${JSON.stringify(chat.choices[0].message.content)} != ${JSON.stringify(want)}`);
  const chatStream = await client.chat.completions.create({ model: "tiny-llada-m", messages: [{ role: "user", content: prompt }],
                                                            max_tokens: 32, seed: 4, temperature: 1.0, stream: true });
  let chatText = "";
  for await (const ch of chatStream) chatText += (ch.choices[0].delta && ch.choices[0].delta.content) || "";
  if (chatText !== want) fail(`streamed chat ${JSON.stringify(chatText)} != ${JSON.stringify(want)}`);
  // What the client sends beside: max_completion_tokens, a developer message, null optional
  // fields, logprobs with top_logprobs, stream_options.include_usage.
  const lp = await client.chat.completions.create({
    model: "tiny-llada-m", messages: [{ role: "developer", content: "answer" }, { role: "user", content: prompt }],
    max_completion_tokens: 16, logprobs: true, top_logprobs: 2, top_p: null, temperature: 0 });
  const content = lp.choices[0].logprobs && lp.choices[0].logprobs.content;
  if (!content || content.length !== lp.usage.completion_tokens) fail(`logprobs ${JSON.stringify(lp.choices[0].logprobs)}`);
  else if (content.map((e) => e.token).join("") !== lp.choices[0].message.content) fail("logprobs tokens do not spell the answer");
  else if (!content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2)) fail("logprob values");
  // The same streamed: the chunks' entries joined are the whole answer's.
  const lpStream = await client.chat.completions.create({
    model: "tiny-llada-m", messages: [{ role: "developer", content: "answer" }, { role: "user", content: prompt }],
    max_completion_tokens: 16, logprobs: true, top_logprobs: 2, temperature: 0, stream: true });
  const streamed = [];
  for await (const ch of lpStream)
    if (ch.choices.length && ch.choices[0].logprobs) streamed.push(...ch.choices[0].logprobs.content);
  if (content && JSON.stringify(streamed.map((e) => [e.token, e.logprob])) !==
      JSON.stringify(content.map((e) => [e.token, e.logprob])))
    fail(`streamed logprobs ${JSON.stringify(streamed)} != ${JSON.stringify(content)}`);
  const usageStream = await client.completions.create({ model: "tiny-llada-m", prompt, max_tokens: 32, seed: 4,
                                                        temperature: 1.0, stream: true, stream_options: { include_usage: true } });
  let usage = null;
  for await (const ch of usageStream) if (ch.usage) usage = ch.usage;
  if (!usage || usage.total_tokens !== usage.prompt_tokens + usage.completion_tokens) fail(`stream usage ${JSON.stringify(usage)}`);
  const models = await client.models.list();
  if (!models.data.some((m) => m.id === "tiny-llada-m")) fail("models.list");
  console.log((ok ? "ok" : "failed") + `: ${JSON.stringify(want)} in ${chunks} chunks`);
} catch (e) {
  fail(String(e));
} finally {
  srv.kill("SIGTERM");
}
process.exit(ok ? 0 : 1);
