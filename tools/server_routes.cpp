// llada-server's endpoints (tools/server_routes.h): POST /v1/completions and
// /v1/chat/completions (stream: true as server-sent events ending in "data: [DONE]"),
// GET /v1/models, /health, /metrics (Prometheus text), /props, POST /tokenize, /detokenize.
#include "tools/server_routes.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "decode/tts.h"
#include "tools/server_request.h"
#include "util/error.h"

namespace llada::tools {
namespace {

using json = nlohmann::json;

// An error answer. The message may quote the client's own bytes (a parser's "last read: ..."):
// it is cut to an excerpt, and bytes that are not UTF-8 are replaced, so the answer is always
// valid JSON and never echoes a large body back.
void send_error(httplib::Response& res, int status, const std::string& msg,
                const std::string& type = "invalid_request_error") {
    res.status = status;
    res.set_content(json{{"error", {{"message", excerpt(msg, 300)}, {"type", type}}}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
}

// One unnamed server-sent event (text that is not UTF-8 replaced, as in every JSON answer).
std::string sse_data(const json& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// A finished request's answer as the client gets it: cut before the first stop sequence, and
// why it ended: "stop" (a stop sequence or the end of text), "length" (max_tokens reached).
struct Final {
    std::string text;
    int64_t tokens = 0;
    const char* finish = "stop";
};

Final final_text(const ServerRequest& r, const std::vector<std::string>& stop) {
    Final f{r.text, r.answer_tokens, "stop"};
    const size_t cut = find_stop(r.text, stop);
    if (cut != std::string::npos) {
        f.text = r.text.substr(0, cut);
        // The tokens up to and including the one the stop sequence starts in.
        f.tokens = 0;
        for (size_t n = 0; n < r.answer_ends.size(); ++n) {
            f.tokens = static_cast<int64_t>(n) + 1;
            if (r.answer_ends[n] > cut) break;
        }
    } else if (!r.stopped && r.answer_tokens >= r.opt.gen) {
        f.finish = "length";
    }
    return f;
}

// OpenAI's logprobs of answer tokens [from, to): each with the log-probability its committing
// step gave it and, for top > 0, that step's most likely tokens. Chat spells them as content
// entries (token, logprob, bytes, top_logprobs); /v1/completions as parallel arrays (tokens,
// token_logprobs, top_logprobs as {token: logprob}, text_offset: each token's byte offset in
// the answer text, `off` being token `from`'s and left at token `to`'s). A stream sends the
// answer's tokens in pieces this way; a whole answer is [0, its tokens).
json logprobs_of(const decode::GenerateResult& res, int64_t from, int64_t to, size_t& off,
                 bool chat, int top, const tokenizer::Tokenizer& tok) {
    // (An alternative may be a special token, end of text say: spelled as such.)
    auto piece = [&](int32_t id) { return tok.token_to_piece(id, true); };
    auto bytes = [](const std::string& s) {
        json b = json::array();
        for (const unsigned char c : s)
            b.push_back(static_cast<int>(c));
        return b;
    };
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    json content = json::array();
    for (int64_t i = from; i < to; ++i) {
        const size_t at = static_cast<size_t>(res.prompt_len + i);
        const std::string t = piece(res.canvas[at]);
        const double lp = res.logprobs[at];
        if (chat) {
            off += t.size();
            json alts = json::array();
            if (top > 0) {
                for (const auto& e : res.top_logprobs[at]) {
                    const std::string u = piece(e.token);
                    alts.push_back({{"token", u}, {"logprob", e.logprob}, {"bytes", bytes(u)}});
                }
            }
            content.push_back(
                {{"token", t}, {"logprob", lp}, {"bytes", bytes(t)}, {"top_logprobs", alts}});
            continue;
        }
        tokens.push_back(t);
        lps.push_back(lp);
        offs.push_back(off);
        off += t.size();
        if (top > 0) {
            json o = json::object();
            for (const auto& e : res.top_logprobs[at]) {
                const std::string u = piece(e.token);
                if (!o.contains(u)) o[u] = e.logprob;  // two ids may spell the same text
            }
            tops.push_back(o);
        }
    }
    if (chat) return {{"content", content}, {"refusal", nullptr}};
    return {{"tokens", tokens},
            {"token_logprobs", lps},
            {"top_logprobs", top > 0 ? tops : json(nullptr)},
            {"text_offset", offs}};
}

std::string new_id(ServerContext& ctx, const char* prefix) {
    return std::string(prefix) + std::to_string(ctx.next_id.fetch_add(1) + 1);
}

// An answer still being given: the drain on SIGTERM waits until none is left.
struct OpenAnswer {
    std::shared_ptr<std::atomic<int>> n;
    explicit OpenAnswer(std::shared_ptr<std::atomic<int>> c) : n(std::move(c)) { ++*n; }
    ~OpenAnswer() { --*n; }
};

// The access log's per-request state: the start is taken where the request is routed, on the
// connection's own thread, and the tokens set by the completion handlers.
struct RequestLog {
    std::chrono::steady_clock::time_point start;
    int64_t tokens = -1;
};
RequestLog& request_log() {
    static thread_local RequestLog log;
    return log;
}

bool parse_body(const std::string& text, httplib::Response& s, json& out) {
    try {
        out = json::parse(text);
    } catch (const json::parse_error& e) {
        send_error(s, 400, std::string("malformed JSON: ") + e.what());
        return false;
    }
    if (!out.is_object()) {
        send_error(s, 400, "the request body must be a JSON object");
        return false;
    }
    return true;
}

// The API key on the guarded paths, the refusal of a connection past --max-connections, and
// the request's start for the access log.
httplib::Server::HandlerResponse pre_routing(ServerContext& ctx, const httplib::Request& q,
                                             httplib::Response& s) {
    request_log().start = std::chrono::steady_clock::now();
    request_log().tokens = -1;
    if (ConnectionThreads::refusing()) {
        send_error(s, 503,
                   "too many connections: the server serves " +
                       std::to_string(ctx.max_connections) +
                       " at once (--max-connections); try again later",
                   "server_error");
        s.set_header("Connection", "close");
        s.set_header("Retry-After", "1");
        // (cpp-httplib 0.11 still waits up to its 5 s keep-alive timeout for another
        // request on the connection, unless the client closes it; the refusal thread
        // is busy meanwhile.)
        return httplib::Server::HandlerResponse::Handled;
    }
    const bool guarded = q.path.rfind("/v1/", 0) == 0 || q.path == "/metrics" ||
                         q.path == "/tokenize" || q.path == "/detokenize" || q.path == "/props";
    if (ctx.api_key.empty() || !guarded ||
        q.get_header_value("Authorization") == "Bearer " + ctx.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
    send_error(s, 401, "a valid 'Authorization: Bearer <key>' header is required",
               "authentication_error");
    return httplib::Server::HandlerResponse::Handled;
}

// One access-log line per request on stderr: method, path, status, answer tokens and time (no
// prompt text).
void log_request(const httplib::Request& q, const httplib::Response& s) {
    RequestLog& log = request_log();
    const auto request_start = log.start;
    const int64_t request_tokens = log.tokens;
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - request_start).count();
    // (A request cpp-httplib refused before routing, e.g. a malformed one, has no
    // start: its time is "-".)
    char time[32] = "-";
    if (request_start != std::chrono::steady_clock::time_point{})
        std::snprintf(time, sizeof(time), "%.3f", t);
    std::fprintf(stderr, "llada-server: %s %s %d %s tokens %s s\n", q.method.c_str(),
                 q.path.c_str(), s.status,
                 request_tokens < 0 ? "-" : std::to_string(request_tokens).c_str(), time);
    log.start = {};
}

// The errors cpp-httplib answers itself (a handler's own errors have a body already).
void http_error(const ServerContext& ctx, const httplib::Request& q, httplib::Response& s) {
    if (!s.body.empty()) {
        return;
    } else if (s.status == 413) {
        send_error(s, 413,
                   "the request body is larger than the server's --max-body-kib (" +
                       std::to_string(ctx.body_kib) + " KiB)");
    } else if (s.status == 404) {
        send_error(s, 404, "no such endpoint: " + q.method + " " + q.path, "not_found_error");
    } else if (s.status == 405) {
        send_error(s, 405, "method " + q.method + " is not allowed");
    } else if (s.status == 400) {
        send_error(s, 400, "malformed HTTP request");
    } else if (s.status == 414) {
        send_error(s, 414, "the request URI is too long");
    } else {
        send_error(s, s.status, "HTTP status " + std::to_string(s.status),
                   s.status >= 500 ? "server_error" : "invalid_request_error");
    }
}

void health(const ServerContext& ctx, httplib::Response& res) {
    if (ctx.draining) {  // a load balancer's cue to send no more
        res.status = 503;
        res.set_content(json{{"status", "shutting down"}}.dump(), "application/json");
        return;
    }
    res.set_content(json{{"status", "ok"}}.dump(), "application/json");
}

void models(const ServerContext& ctx, httplib::Response& res) {
    const auto t =
        std::chrono::duration_cast<std::chrono::seconds>(ctx.started.time_since_epoch()).count();
    res.set_content(json{{"object", "list"},
                         {"data",
                          {{{"id", ctx.model_name},
                            {"object", "model"},
                            {"created", t},
                            {"owned_by", "llada.cpp"}}}}}
                        .dump(),
                    "application/json");
}

// llama-server's /tokenize {"content", "add_special"} -> {"tokens"}.
void tokenize(const ServerContext& ctx, const std::string& body_text, httplib::Response& res) {
    json b;
    if (!parse_body(body_text, res, b)) return;
    if (!b.contains("content") || !b["content"].is_string())
        return send_error(res, 400, "'content' must be a string");
    if (b.contains("add_special") && !b["add_special"].is_boolean())
        return send_error(res, 400, "'add_special' must be a boolean");
    const bool special = b.value("add_special", false);
    const std::string text = b["content"];
    if (text.size() > static_cast<size_t>(ctx.engine.limits().max_prompt) * 64)
        return send_error(res, 400, "'content' is longer than the server tokenizes");
    const auto ids = ctx.lm.tok->encode(text, special && ctx.lm.tok->add_bos_default(), false);
    res.set_content(json{{"tokens", ids}}.dump(), "application/json");
}

// /detokenize {"tokens"} -> {"content"}.
void detokenize(const ServerContext& ctx, const std::string& text, httplib::Response& res) {
    json b;
    if (!parse_body(text, res, b)) return;
    if (!b.contains("tokens") || !b["tokens"].is_array())
        return send_error(res, 400, "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const auto& v : b["tokens"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            v.get<int64_t>() >= ctx.lm.tok->n_vocab())
            return send_error(
                res, 400,
                "'tokens' must be token ids in [0, " + std::to_string(ctx.lm.tok->n_vocab()) + ")");
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    res.set_content(json{{"content", ctx.lm.tok->decode(ids, false)}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
}

// /props: the server's settings.
void props(const ServerContext& ctx, httplib::Response& res) {
    json settings = {{"policy", ctx.dec.policy},
                     {"max_tokens", ctx.dec.opt.gen},
                     {"block", ctx.dec.opt.block},
                     {"threshold", ctx.dec.opt.threshold},
                     {"temperature", ctx.dec.opt.temperature},
                     {"seed", ctx.dec.opt.seed}};
    res.set_content(json{{"model", ctx.model_name},
                         {"model_path", ctx.model_path},
                         {"default_generation_settings", settings},
                         {"total_slots", ctx.engine.limits().parallel},
                         {"queue", ctx.engine.limits().queue},
                         {"max_prompt", ctx.engine.limits().max_prompt},
                         {"max_gen", ctx.engine.limits().max_gen},
                         {"chat_format", ctx.chat_format ? json(true) : json(false)},
                         {"n_ctx", ctx.engine.n_pos()}}
                        .dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
}

void metrics(const ServerContext& ctx, httplib::Response& res) {
    const auto c = ctx.engine.counters();
    std::string m;
    auto line = [&](const char* name, const char* help, double v) {
        char num[64];
        if (v == std::floor(v) && std::fabs(v) < 1e15) {
            std::snprintf(num, sizeof(num), "%lld", static_cast<long long>(v));
        } else {
            std::snprintf(num, sizeof(num), "%.9g", v);
        }
        m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
             " " + num + "\n";
    };
    // Requests (the HTTP side) and candidates (the engine's generations: n / best_of
    // run several per request) apart; accepted = completed + failed + cancelled +
    // timed_out + in_flight.
    const int64_t accepted = ctx.rc->accepted, completed = ctx.rc->completed,
                  failed = ctx.rc->failed, cancelled = ctx.rc->cancelled,
                  timed_out = ctx.rc->timed_out;
    line("llada_requests_accepted_total", "requests admitted to the engine", accepted);
    line("llada_requests_completed_total", "requests answered", completed);
    line("llada_requests_failed_total", "admitted requests whose generation failed", failed);
    line("llada_requests_cancelled_total", "requests whose client went away", cancelled);
    line("llada_requests_timed_out_total", "requests past --timeout", timed_out);
    line("llada_requests_rejected_total", "requests refused with a full queue (503)",
         ctx.rc->rejected);
    line("llada_requests_invalid_total", "requests refused before admission (4xx)",
         ctx.rc->invalid);
    const tools::ConnectionThreads* conns = ctx.connections;
    line("llada_connections_refused_total", "connections past --max-connections answered 503",
         conns ? static_cast<int64_t>(conns->refused()) : 0);
    m += "# HELP llada_requests_in_flight admitted requests not yet ended\n# TYPE "
         "llada_requests_in_flight gauge\nllada_requests_in_flight " +
         std::to_string(accepted - completed - failed - cancelled - timed_out) + "\n";
    line("llada_candidates_total", "generations admitted (a request's candidates)", c.requests);
    line("llada_candidates_completed_total", "generations finished", c.completed);
    line("llada_candidates_failed_total", "generations that failed", c.failed);
    line("llada_steps_total", "engine steps (one forward each)", c.steps);
    line("llada_tokens_total", "answer tokens generated", c.tokens);
    line("llada_busy_seconds_total", "time spent in forwards", c.busy_s);
    m += "# HELP llada_queue_length requests waiting\n# TYPE llada_queue_length gauge\n"
         "llada_queue_length " +
         std::to_string(ctx.engine.queue_length()) + "\n";
    m += "# HELP llada_batch_occupancy mean requests per step\n# TYPE "
         "llada_batch_occupancy gauge\nllada_batch_occupancy " +
         std::to_string(c.steps ? static_cast<double>(c.occupancy_sum) / c.steps : 0.0) + "\n";
    m += "# HELP llada_tokens_per_second answer tokens per busy second\n# TYPE "
         "llada_tokens_per_second gauge\nllada_tokens_per_second " +
         std::to_string(c.busy_s > 0 ? c.tokens / c.busy_s : 0.0) + "\n";
    m += "# HELP llada_kv_cache_bytes KV cache memory, all sequences\n# TYPE "
         "llada_kv_cache_bytes gauge\nllada_kv_cache_bytes " +
         std::to_string(ctx.engine.kv_bytes()) + "\n";
    m += "# HELP llada_kv_cache_bytes_per_sequence one sequence's KV cache\n# TYPE "
         "llada_kv_cache_bytes_per_sequence gauge\nllada_kv_cache_bytes_per_sequence " +
         std::to_string(ctx.engine.kv_bytes_per_sequence()) + "\n";
    res.set_content(m, "text/plain; version=0.0.4");
}

// /v1/completions and /v1/chat/completions: the request checked whole before the first byte,
// its candidates submitted together, then answered whole or streamed.
void generation(ServerContext& ctx, const httplib::Request& req, const std::string& text,
                httplib::Response& res, bool chat) {
    OpenAnswer answer(ctx.open_answers);  // (counted before the check: the drain waits)
    if (ctx.draining) {
        res.set_header("Connection", "close");
        res.set_header("Retry-After", "1");
        ++ctx.rc->rejected;
        return send_error(res, 503, "the server is shutting down", "server_busy");
    }
    // A request refused before admission (counted as invalid).
    auto refuse = [&](int status, const std::string& msg) {
        ++ctx.rc->invalid;
        send_error(res, status, msg);
    };
    json body;
    try {
        body = json::parse(text);
    } catch (const json::parse_error& e) {
        // JSON text is UTF-8: a body that is not (a prompt in Latin-1, say) is the
        // client's error, named as such.
        if (std::string(e.what()).find("UTF-8") != std::string::npos) {
            return refuse(400, "the request body is not valid UTF-8 (at byte " +
                                   std::to_string(e.byte) + ")");
        }
        return refuse(400, std::string("malformed JSON: ") + e.what());
    }
    auto r = std::make_shared<ServerRequest>();
    ParsedRequest p;
    try {
        p = parse_request(body, ctx.dec.policy, ctx.dec.opt, ctx.engine.limits(), chat);
        r->policy = p.policy;
        r->opt = p.opt;
        if (chat) {
            if (!ctx.chat_format) {
                return refuse(400,
                              "this model has no chat format for "
                              "/v1/chat/completions (" +
                                  ctx.chat_error + "); use /v1/completions");
            }
            // Markers as special tokens, message text as text: a message cannot forge
            // a turn by typing a marker.
            r->prompt = ctx.chat_format->encode(*ctx.lm.tok, parse_messages(body));
        } else {
            r->prompt = request_prompt(body, *ctx.lm.tok, ctx.engine.limits().max_prompt);
        }
        if (static_cast<int>(r->prompt.size()) > ctx.engine.limits().max_prompt)
            throw Error("the prompt has " + std::to_string(r->prompt.size()) +
                        " tokens; the server takes at most " +
                        std::to_string(ctx.engine.limits().max_prompt));
    } catch (const std::exception& e) {
        return refuse(400, e.what());
    }
    // Everything the engine would refuse is refused here, before the first byte: a
    // streamed request's error is then a 400 too, not a 200 and an error event.
    if (const std::string why = ctx.engine.validate(*r); !why.empty()) return refuse(400, why);
    const std::vector<std::string> stop = p.stop;
    // best_of candidates, decoded together: candidate k samples with seed + k
    // (decode/tts.h), each its own request to the engine and its own KV sequence.
    std::vector<std::shared_ptr<ServerRequest>> cands = {r};
    for (int k = 1; k < p.best_of; ++k) {
        auto c = std::make_shared<ServerRequest>();
        c->policy = r->policy;
        c->opt = r->opt;
        c->opt.seed = r->opt.seed + static_cast<uint64_t>(k);
        c->prompt = r->prompt;
        cands.push_back(c);
    }
    const std::string id = new_id(ctx, chat ? "chatcmpl-" : "cmpl-");
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    const bool with_logprobs = p.logprobs >= 0;
    auto chunk_of = [&, chat, id, created, with_logprobs](int index, const std::string& delta,
                                                          const char* finish,
                                                          json logprobs = nullptr) {
        json choice = {{"index", index}};
        if (chat) {
            choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
        } else {
            choice["text"] = delta;
        }
        if (with_logprobs) choice["logprobs"] = std::move(logprobs);
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        return json{{"id", id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", ctx.model_name},
                    {"choices", {choice}}};
    };
    // All candidates queued or none: a partly queued request would hold sequences for
    // an answer that cannot be given.
    auto submit_all = [&] {
        for (size_t k = 0; k < cands.size(); ++k) {
            if (ctx.engine.submit(cands[k])) continue;
            for (size_t j = 0; j < k; ++j) {
                ctx.engine.cancel(cands[j]);
                ctx.engine.wait(*cands[j]);
            }
            res.set_header("Retry-After", "1");
            send_error(res, 503, "the server's queue is full", "server_busy");
            ++ctx.rc->rejected;
            return false;
        }
        ++ctx.rc->accepted;
        return true;
    };
    if (!p.stream) {
        // A stop sequence ends a candidate's generation at the step that commits it.
        if (!stop.empty()) {
            for (auto& c : cands) {
                c->on_step = [stop](const ServerRequest::Committed& c) {
                    return find_stop(c.text, stop) == std::string::npos;
                };
            }
        }
        if (!submit_all()) return;
        // Waited for in slices, looking between them whether the client has gone: a
        // request whose client left is cancelled, its sequences freed for others.
        const int sock = connection_socket(req);
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.timeout_s);
        bool late = false, gone = false;
        for (auto& c : cands) {
            for (;;) {
                const double left =
                    std::chrono::duration<double>(deadline - std::chrono::steady_clock::now())
                        .count();
                if (ctx.engine.wait_for(*c, std::clamp(left, 0.0, 0.1))) break;
                if (left <= 0.1) {
                    late = true;
                    break;
                }
                if (sock >= 0 && peer_gone(sock)) {
                    gone = true;
                    break;
                }
            }
            if (late || gone) break;
        }
        if (gone) {
            for (auto& c : cands) {
                ctx.engine.cancel(c);
                ctx.engine.wait(*c);
            }
            ++ctx.rc->cancelled;
            return;  // nobody to answer
        }
        if (late) {
            for (auto& c : cands) {
                ctx.engine.cancel(c);
                ctx.engine.wait(*c);
            }
            ++ctx.rc->timed_out;
            return send_error(res, 408,
                              "the request did not finish within the server's "
                              "--timeout",
                              "timeout_error");
        }
        for (auto& c : cands) {
            if (!c->error.empty()) {
                ++ctx.rc->failed;
                return send_error(res, 400, c->error);
            }
        }
        // The n choices: every candidate in seed order, or with best_of > n the best
        // by 'select', chosen again among the rest for each further choice.
        std::vector<int> order;
        std::vector<int> rest(cands.size());
        for (size_t k = 0; k < cands.size(); ++k)
            rest[k] = static_cast<int>(k);
        while (static_cast<int>(order.size()) < p.n) {
            int pick = 0;
            if (p.best_of > p.n) {
                std::vector<std::string> answers;
                std::vector<double> conf;
                for (int k : rest) {
                    answers.push_back(final_text(*cands[k], stop).text);
                    conf.push_back(cands[k]->result.mean_confidence());
                }
                pick = p.select == "vote" ? decode::select_by_vote(answers, conf)
                                          : decode::select_by_confidence(conf);
            }
            order.push_back(rest[pick]);
            rest.erase(rest.begin() + pick);
        }
        json choices = json::array();
        int64_t completion = 0, nfe = 0;
        for (const auto& c : cands) {
            completion += final_text(*c, stop).tokens;
            nfe = std::max<int64_t>(nfe, c->result.stats.forwards);
        }
        for (size_t i = 0; i < order.size(); ++i) {
            const Final f = final_text(*cands[order[i]], stop);
            json choice = {{"index", i}, {"finish_reason", f.finish}};
            if (chat) {
                choice["message"] = {{"role", "assistant"}, {"content", f.text}};
            } else {
                choice["text"] = f.text;
            }
            if (p.logprobs >= 0) {
                size_t off = 0;
                choice["logprobs"] = logprobs_of(cands[order[i]]->result, 0, f.tokens, off, chat,
                                                 p.logprobs, *ctx.lm.tok);
            }
            // Which candidate (seed + candidate) the choice is, when several ran.
            if (cands.size() > 1) choice["candidate"] = order[i];
            choices.push_back(choice);
        }
        res.set_content(
            json{{"id", id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", ctx.model_name},
                 {"choices", choices},
                 {"usage",
                  {{"prompt_tokens", r->prompt.size()},
                   {"completion_tokens", completion},
                   {"total_tokens", static_cast<int64_t>(r->prompt.size()) + completion}}},
                 {"nfe", nfe}}
                .dump(-1, ' ', false, json::error_handler_t::replace),
            "application/json");
        ++ctx.rc->completed;
        request_log().tokens = completion;
        return;
    }
    // Streaming (n choices, best_of = n): each step's newly committed prefix text of
    // each candidate as a delta of its index.
    struct Stream {
        std::mutex mu;
        std::condition_variable cv;
        std::deque<std::string> events;
        std::vector<std::string> sent;
        // With logprobs: per candidate, the answer tokens whose logprobs were sent (every
        // token whose text lies wholly in `sent`) and the bytes they spell.
        std::vector<int64_t> sent_tokens;
        std::vector<size_t> token_bytes;
        bool finished = false;
    };
    auto st = std::make_shared<Stream>();
    st->sent.resize(cands.size());
    st->sent_tokens.assign(cands.size(), 0);
    st->token_bytes.assign(cands.size(), 0);
    const int top = p.logprobs;
    const tokenizer::Tokenizer* tok = ctx.lm.tok.get();
    // With stop sequences, the last (longest - 1) bytes are held back until it is
    // known that no stop sequence starts in them.
    size_t hold = 0;
    for (const auto& e : stop)
        hold = std::max(hold, e.size() - 1);
    for (size_t k = 0; k < cands.size(); ++k) {
        const int index = static_cast<int>(k);
        cands[k]->on_step = [st, chunk_of, stop, hold, index, chat, top, tok,
                             with_logprobs](const ServerRequest::Committed& c) {
            const std::string& stable = c.text;
            std::lock_guard<std::mutex> lock(st->mu);
            std::string& sent = st->sent[index];
            const size_t cut = find_stop(stable, stop);
            size_t end = cut != std::string::npos ? cut
                         : stable.size() > hold   ? stable.size() - hold
                                                  : 0;
            // Not inside a UTF-8 character.
            while (end > 0 && end < stable.size() &&
                   (static_cast<unsigned char>(stable[end]) & 0xC0) == 0x80)
                --end;
            // Only text that extends what was sent: deltas are never taken back.
            if (end > sent.size() && stable.compare(0, sent.size(), sent) == 0) {
                json lp = nullptr;
                if (with_logprobs) {  // the tokens now wholly sent (decode() joins the pieces)
                    int64_t n = 0;
                    for (size_t b = 0; n < static_cast<int64_t>(c.ids.size()); ++n) {
                        b += tok->token_to_piece(c.ids[static_cast<size_t>(n)], false).size();
                        if (b > end) break;
                    }
                    int64_t& from = st->sent_tokens[index];
                    lp = logprobs_of(c.so_far, from, n, st->token_bytes[index], chat, top, *tok);
                    from = std::max(from, n);
                }
                st->events.push_back(sse_data(
                    chunk_of(index, stable.substr(sent.size(), end - sent.size()), nullptr, lp)));
                sent = stable.substr(0, end);
            }
            st->cv.notify_all();
            return cut == std::string::npos;
        };
        // Opt-in: each step's changed positions as named SSE events ("llada.step"),
        // which OpenAI's clients skip (they read unnamed events); with several choices
        // each event says whose it is ("index").
        if (p.diffusion_events) {
            const bool several = cands.size() > 1;
            cands[k]->on_event = [st, index, several](const std::string& e) {
                std::lock_guard<std::mutex> lock(st->mu);
                const std::string data =
                    several ? "{\"index\":" + std::to_string(index) + "," + e.substr(1) : e;
                st->events.push_back("event: llada.step\ndata: " + data + "\n\n");
                st->cv.notify_all();
            };
        }
    }
    if (!submit_all()) return;
    const bool include_usage = p.include_usage;
    const int64_t prompt_tokens = static_cast<int64_t>(r->prompt.size());
    const json usage_head = {{"id", id},
                             {"object", chat ? "chat.completion.chunk" : "text_completion"},
                             {"created", created},
                             {"model", ctx.model_name},
                             {"choices", json::array()}};
    std::thread([&engine = ctx.engine, cands, st, chunk_of, stop, include_usage, prompt_tokens,
                 usage_head, rc = ctx.rc, timeout_s = ctx.timeout_s, with_logprobs, chat, top,
                 tok] {
        // --timeout covers a stream as it does any request: past it, the candidates
        // are cancelled and the stream ends with a timeout error and [DONE].
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        bool late = false;
        for (const auto& c : cands) {
            const double left =
                std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
            if (late || !engine.wait_for(*c, std::max(0.0, left))) late = true;
        }
        if (late) {
            for (const auto& c : cands) {
                engine.cancel(c);
                engine.wait(*c);
            }
            ++rc->timed_out;
            std::lock_guard<std::mutex> lock(st->mu);
            st->events.push_back(sse_data(
                json{{"error",
                      {{"message", "the request did not finish within the server's --timeout"},
                       {"type", "timeout_error"}}}}));
            st->events.push_back("data: [DONE]\n\n");
            st->finished = true;
            st->cv.notify_all();
            return;
        }
        std::lock_guard<std::mutex> lock(st->mu);
        int64_t completion = 0;
        bool cancelled = false, failed = false;
        for (size_t k = 0; k < cands.size(); ++k) {
            const auto& c = *cands[k];
            const int index = static_cast<int>(k);
            if (!c.error.empty()) {
                (c.cancelled ? cancelled : failed) = true;
                st->events.push_back(sse_data(json{{"error", {{"message", c.error}}}}));
                continue;
            }
            const Final f = final_text(c, stop);
            completion += f.tokens;
            const std::string& sent = st->sent[k];
            // The tokens whose logprobs are still owed go with the rest of the text, or with
            // the finish chunk when no text is left.
            json lp = nullptr;
            if (with_logprobs) {
                int64_t& from = st->sent_tokens[k];
                lp = logprobs_of(c.result, std::min(from, f.tokens), f.tokens, st->token_bytes[k],
                                 chat, top, *tok);
                from = f.tokens;
            }
            if (f.text.size() > sent.size() && f.text.compare(0, sent.size(), sent) == 0) {
                st->events.push_back(
                    sse_data(chunk_of(index, f.text.substr(sent.size()), nullptr, lp)));
                lp = nullptr;
            }
            st->events.push_back(sse_data(chunk_of(index, "", f.finish, lp)));
        }
        // stream_options.include_usage: OpenAI's last chunk, no choices, the usage.
        if (include_usage) {
            json u = usage_head;
            u["usage"] = {{"prompt_tokens", prompt_tokens},
                          {"completion_tokens", completion},
                          {"total_tokens", prompt_tokens + completion}};
            st->events.push_back(sse_data(u));
        }
        st->events.push_back("data: [DONE]\n\n");
        st->finished = true;
        st->cv.notify_all();
        ++(cancelled ? rc->cancelled : failed ? rc->failed : rc->completed);
    }).detach();
    res.set_header("Cache-Control", "no-cache");
    // The stream is an open answer until its provider is let go (after [DONE] or the
    // client's leaving): the drain waits for it.
    auto stream_open = std::make_shared<OpenAnswer>(ctx.open_answers);
    res.set_chunked_content_provider(
        "text/event-stream",
        [st, cands, &engine = ctx.engine, stream_open](size_t, httplib::DataSink& sink) {
            // The events are taken under the stream's lock and written without it: the
            // engine thread takes that lock (holding its own) to add events, so a
            // cancel from here must not hold it.
            std::deque<std::string> out;
            bool finished = false;
            {
                std::unique_lock<std::mutex> lock(st->mu);
                st->cv.wait(lock, [&] { return !st->events.empty() || st->finished; });
                out.swap(st->events);
                finished = st->finished;
            }
            for (const std::string& e : out) {
                if (!sink.write(e.data(), e.size())) {
                    for (const auto& c : cands)  // the client went away: free them
                        engine.cancel(c);
                    return false;
                }
            }
            if (finished) sink.done();
            return true;
        });
}

}  // namespace

void install_routes(httplib::Server& srv, ServerContext& ctx) {
    srv.set_pre_routing_handler(
        [&ctx](const httplib::Request& q, httplib::Response& s) { return pre_routing(ctx, q, s); });
    srv.set_logger(log_request);
    srv.set_error_handler(
        [&ctx](const httplib::Request& q, httplib::Response& s) { http_error(ctx, q, s); });
    srv.Get("/health", [&ctx](const httplib::Request&, httplib::Response& s) { health(ctx, s); });
    srv.Get("/v1/models",
            [&ctx](const httplib::Request&, httplib::Response& s) { models(ctx, s); });
    srv.Get("/props", [&ctx](const httplib::Request&, httplib::Response& s) { props(ctx, s); });
    srv.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& s) { metrics(ctx, s); });
    // Every POST reads its body through this, to --max-body-kib whatever its framing (a chunked
    // body included), and answers 413 past it.
    using Handler =
        std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
    auto post = [&](const std::string& path, Handler fn) {
        srv.Post(path, [&ctx, fn](const httplib::Request& q, httplib::Response& s,
                                  const httplib::ContentReader& reader) {
            std::string body;
            switch (read_body(q, reader, ctx.max_body(), body)) {
                case BodyRead::ok:
                    return fn(q, body, s);
                case BodyRead::too_large:
                    s.set_header("Connection",
                                 "close");  // the rest of the body is not read
                    return send_error(s, 413,
                                      "the request body is larger than the server's "
                                      "--max-body-kib (" +
                                          std::to_string(ctx.body_kib) + " KiB)");
                case BodyRead::failed:
                    s.set_header("Connection", "close");
                    return send_error(s, 400, "the request body could not be read whole");
            }
        });
    };
    post("/tokenize", [&ctx](const httplib::Request&, const std::string& b, httplib::Response& s) {
        tokenize(ctx, b, s);
    });
    post("/detokenize", [&ctx](const httplib::Request&, const std::string& b,
                               httplib::Response& s) { detokenize(ctx, b, s); });
    post("/v1/completions", [&ctx](const httplib::Request& q, const std::string& b,
                                   httplib::Response& s) { generation(ctx, q, b, s, false); });
    post("/v1/chat/completions", [&ctx](const httplib::Request& q, const std::string& b,
                                        httplib::Response& s) { generation(ctx, q, b, s, true); });
}

}  // namespace llada::tools
