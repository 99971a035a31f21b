// llada-server: an OpenAI-compatible HTTP API over the step engine (tools/server_engine.h):
// POST /v1/completions, POST /v1/chat/completions (stream: true as server-sent events ending in
// "data: [DONE]"), GET /v1/models, GET /health, GET /metrics (Prometheus text). Diffusion
// parameters (steps, block, policy, threshold, lookahead, revise, ...) are request fields beside
// the OpenAI ones, with the server's flags as defaults; `seed` makes a request reproducible
// whether it ran alone or batched with others.
#include <httplib.h>
#include <sys/socket.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "decode/tts.h"
#include "tokenizer/chat.h"
#include "tools/common.h"
#include "tools/server_engine.h"
#include "tools/server_request.h"
#include "util/error.h"

using namespace llada;
using json = nlohmann::json;

namespace {

void send_error(httplib::Response& res, int status, const std::string& msg,
                const std::string& type = "invalid_request_error") {
    res.status = status;
    res.set_content(json{{"error", {{"message", msg}, {"type", type}}}}.dump(), "application/json");
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

Final final_text(const tools::ServerRequest& r, const std::vector<std::string>& stop) {
    Final f{r.text, r.answer_tokens, "stop"};
    const size_t cut = tools::find_stop(r.text, stop);
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

std::string new_id(const char* prefix) {
    static std::atomic<int64_t> n{0};
    return std::string(prefix) + std::to_string(n.fetch_add(1) + 1);
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        // SIGINT / SIGTERM: blocked before any thread starts (so in every one) and taken by one
        // that stops the server, so in-flight requests finish and the process exits cleanly.
        sigset_t stop_signals;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
        std::string model_path, host = "127.0.0.1";
        int port = 8080, threads = 2, body_kib = 256;
        double timeout_s = 600.0;
        std::string api_key, web_dir;
        tools::ServerLimits limits;
        tools::DecodeFlags dec;
        tools::DeviceFlags devf;
        tools::ArgTable args("llada-server",
                             "Serves a diffusion model over an OpenAI-compatible HTTP API; every "
                             "step is one forward over all active requests.");
        args.section("Server");
        args.string({"-m", "--model"}, "FILE",
                    std::string("GGUF model (default: the bundled ") + tools::kDefaultModel + ")",
                    &model_path);
        args.string({"--host"}, "ADDR", "address to listen on (default 127.0.0.1)", &host);
        args.integer({"--port"}, "N", "port (default 8080; 0: any free port, printed)", &port, 0,
                     65535);
        args.integer({"--parallel"}, "N", "requests decoded together (default 4)", &limits.parallel,
                     1, 1024);
        args.integer({"--queue"}, "N", "requests waiting beyond those (default 16; full: 503)",
                     &limits.queue, 0, 1 << 20);
        args.integer({"--max-gen"}, "N", "largest max_tokens (default 128)", &limits.max_gen, 1,
                     1 << 20);
        args.integer({"--max-prompt"}, "N",
                     "longest prompt in tokens (default: the context minus --max-gen)",
                     &limits.max_prompt, 0, 1 << 20);
        args.integer({"--max-body-kib"}, "N", "largest request body (default 256 KiB)", &body_kib,
                     1, 1 << 20);
        args.real({"--timeout"}, "S",
                  "a request that has not finished after S seconds is cancelled (default 600)",
                  &timeout_s, 0.001, 1e9);
        args.string({"--web"}, "DIR",
                    "serve the page at / from DIR (default: the source tree's web/; 'none': no "
                    "page)",
                    &web_dir);
        args.string({"--api-key"}, "KEY",
                    "require 'Authorization: Bearer KEY' on /v1/ requests (default: none)",
                    &api_key);
        args.integer({"-t", "--threads"}, "N", "CPU threads (default 2)", &threads, 1, 1024);
        dec.add_to(args);
        devf.add_to(args);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) model_path = tools::find_default_model(argv[0]);
        tools::LoadedModel lm = tools::load_model(model_path);
        if (!args.given("--policy")) dec.policy = "dual-cache";
        dec.finish(args, *lm.model);
        limits.check_slots = dec.opt.revise.tail_dense;
        if (!args.given("--threshold") && dec.policy == "dual-cache")
            dec.opt.threshold = decode::kDefaultThreshold;
        dec.set_calibration_file(model_path, threads);
        runtime::ThreadPool pool(threads);
        auto device = devf.make(pool);
        limits.kv_f16 = dec.opt.kernels.kv_f16;
        tools::ServerEngine engine(lm, *device, limits);
        const std::string model_name = std::filesystem::path(model_path).stem().string();
        const auto started = std::chrono::system_clock::now();

        // The chat format from the model file, once; chat requests on a model without one get
        // the reason.
        std::optional<tokenizer::ChatTemplate> chat_format;
        std::string chat_error;
        try {
            chat_format = tokenizer::ChatTemplate::from_tokenizer(*lm.tok);
        } catch (const Error& e) {
            chat_error = e.what();
        }

        httplib::Server srv;
        srv.set_payload_max_length(static_cast<size_t>(body_kib) * 1024);
        // Every admitted or queued request holds an HTTP worker while it waits: enough workers
        // for all of them, plus a few for /health and /metrics.
        const size_t workers = static_cast<size_t>(limits.parallel + limits.queue + 4);
        srv.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
        if (!api_key.empty()) {
            srv.set_pre_routing_handler([&](const httplib::Request& q, httplib::Response& s) {
                if (q.path.rfind("/v1/", 0) != 0)
                    return httplib::Server::HandlerResponse::Unhandled;
                if (q.get_header_value("Authorization") == "Bearer " + api_key)
                    return httplib::Server::HandlerResponse::Unhandled;
                send_error(s, 401, "a valid 'Authorization: Bearer <key>' header is required",
                           "authentication_error");
                return httplib::Server::HandlerResponse::Handled;
            });
        }
        // The errors cpp-httplib answers itself (a handler's own errors have a body already).
        srv.set_error_handler([](const httplib::Request& q, httplib::Response& s) {
            if (s.status == 413) {
                send_error(s, 413, "the request body exceeds the server's --max-body-kib");
            } else if (!s.body.empty()) {
                return;
            } else if (s.status == 404) {
                send_error(s, 404, "no such endpoint: " + q.method + " " + q.path,
                           "not_found_error");
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
        });
        srv.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
            res.set_content(json{{"status", "ok"}}.dump(), "application/json");
        });
        srv.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
            const auto t =
                std::chrono::duration_cast<std::chrono::seconds>(started.time_since_epoch())
                    .count();
            res.set_content(json{{"object", "list"},
                                 {"data",
                                  {{{"id", model_name},
                                    {"object", "model"},
                                    {"created", t},
                                    {"owned_by", "llada.cpp"}}}}}
                                .dump(),
                            "application/json");
        });
        srv.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
            const auto c = engine.counters();
            std::string m;
            auto line = [&](const char* name, const char* help, double v) {
                m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name +
                     " counter\n" + name + " " + std::to_string(v) + "\n";
            };
            line("llada_requests_total", "requests accepted", c.requests);
            line("llada_requests_completed_total", "requests completed", c.completed);
            line("llada_requests_rejected_total", "requests refused with a full queue", c.rejected);
            line("llada_requests_failed_total", "requests that failed", c.failed);
            line("llada_steps_total", "engine steps (one forward each)", c.steps);
            line("llada_tokens_total", "answer tokens generated", c.tokens);
            line("llada_busy_seconds_total", "time spent in forwards", c.busy_s);
            m += "# HELP llada_queue_length requests waiting\n# TYPE llada_queue_length gauge\n"
                 "llada_queue_length " +
                 std::to_string(engine.queue_length()) + "\n";
            m += "# HELP llada_batch_occupancy mean requests per step\n# TYPE "
                 "llada_batch_occupancy gauge\nllada_batch_occupancy " +
                 std::to_string(c.steps ? static_cast<double>(c.occupancy_sum) / c.steps : 0.0) +
                 "\n";
            m += "# HELP llada_tokens_per_second answer tokens per busy second\n# TYPE "
                 "llada_tokens_per_second gauge\nllada_tokens_per_second " +
                 std::to_string(c.busy_s > 0 ? c.tokens / c.busy_s : 0.0) + "\n";
            m += "# HELP llada_kv_cache_bytes KV cache memory, all sequences\n# TYPE "
                 "llada_kv_cache_bytes gauge\nllada_kv_cache_bytes " +
                 std::to_string(engine.kv_bytes()) + "\n";
            m += "# HELP llada_kv_cache_bytes_per_sequence one sequence's KV cache\n# TYPE "
                 "llada_kv_cache_bytes_per_sequence gauge\nllada_kv_cache_bytes_per_sequence " +
                 std::to_string(engine.kv_bytes_per_sequence()) + "\n";
            res.set_content(m, "text/plain; version=0.0.4");
        });
        auto handle = [&](const httplib::Request& req, httplib::Response& res, bool chat) {
            json body;
            try {
                body = json::parse(req.body);
            } catch (const std::exception& e) {
                return send_error(res, 400, std::string("malformed JSON: ") + e.what());
            }
            auto r = std::make_shared<tools::ServerRequest>();
            tools::ParsedRequest p;
            try {
                p = tools::parse_request(body, dec.policy, dec.opt, engine.limits());
                r->policy = p.policy;
                r->opt = p.opt;
                if (chat) {
                    if (!chat_format) {
                        return send_error(res, 400,
                                          "this model has no chat format for "
                                          "/v1/chat/completions (" +
                                              chat_error + "); use /v1/completions");
                    }
                    // Markers as special tokens, message text as text: a message cannot forge
                    // a turn by typing a marker.
                    r->prompt = chat_format->encode(*lm.tok, tools::parse_messages(body));
                } else {
                    if (!body.contains("prompt") || !body["prompt"].is_string())
                        throw Error("'prompt' must be a string");
                    r->prompt = tools::problem_ids(*lm.tok, body["prompt"], false);
                }
                if (static_cast<int>(r->prompt.size()) > engine.limits().max_prompt)
                    throw Error("the prompt has " + std::to_string(r->prompt.size()) +
                                " tokens; the server takes at most " +
                                std::to_string(engine.limits().max_prompt));
            } catch (const std::exception& e) {
                return send_error(res, 400, e.what());
            }
            const std::vector<std::string> stop = p.stop;
            // best_of candidates, decoded together: candidate k samples with seed + k
            // (decode/tts.h), each its own request to the engine and its own KV sequence.
            std::vector<std::shared_ptr<tools::ServerRequest>> cands = {r};
            for (int k = 1; k < p.best_of; ++k) {
                auto c = std::make_shared<tools::ServerRequest>();
                c->policy = r->policy;
                c->opt = r->opt;
                c->opt.seed = r->opt.seed + static_cast<uint64_t>(k);
                c->prompt = r->prompt;
                cands.push_back(c);
            }
            const std::string id = new_id(chat ? "chatcmpl-" : "cmpl-");
            const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
            auto chunk_of = [&, chat, id, created](int index, const std::string& delta,
                                                   const char* finish) {
                json choice = {{"index", index}};
                if (chat) {
                    choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
                } else {
                    choice["text"] = delta;
                }
                choice["finish_reason"] = finish ? json(finish) : json(nullptr);
                return json{{"id", id},
                            {"object", chat ? "chat.completion.chunk" : "text_completion"},
                            {"created", created},
                            {"model", model_name},
                            {"choices", {choice}}};
            };
            // All candidates queued or none: a partly queued request would hold sequences for
            // an answer that cannot be given.
            auto submit_all = [&] {
                for (size_t k = 0; k < cands.size(); ++k) {
                    if (engine.submit(cands[k])) continue;
                    for (size_t j = 0; j < k; ++j) {
                        engine.cancel(cands[j]);
                        engine.wait(*cands[j]);
                    }
                    res.set_header("Retry-After", "1");
                    send_error(res, 503, "the server's queue is full", "server_busy");
                    return false;
                }
                return true;
            };
            if (!p.stream) {
                // A stop sequence ends a candidate's generation at the step that commits it.
                if (!stop.empty()) {
                    for (auto& c : cands) {
                        c->on_step = [stop](const std::string& stable) {
                            return tools::find_stop(stable, stop) == std::string::npos;
                        };
                    }
                }
                if (!submit_all()) return;
                const auto deadline =
                    std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
                bool late = false;
                for (auto& c : cands) {
                    const double left =
                        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now())
                            .count();
                    if (late || !engine.wait_for(*c, std::max(0.0, left))) late = true;
                }
                if (late) {
                    for (auto& c : cands) {
                        engine.cancel(c);
                        engine.wait(*c);
                    }
                    return send_error(res, 408,
                                      "the request did not finish within the server's "
                                      "--timeout",
                                      "timeout_error");
                }
                for (auto& c : cands) {
                    if (!c->error.empty()) return send_error(res, 400, c->error);
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
                    // Which candidate (seed + candidate) the choice is, when several ran.
                    if (cands.size() > 1) choice["candidate"] = order[i];
                    choices.push_back(choice);
                }
                res.set_content(
                    json{{"id", id},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", created},
                         {"model", model_name},
                         {"choices", choices},
                         {"usage",
                          {{"prompt_tokens", r->prompt.size()},
                           {"completion_tokens", completion},
                           {"total_tokens", static_cast<int64_t>(r->prompt.size()) + completion}}},
                         {"nfe", nfe}}
                        .dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
                return;
            }
            // Streaming (n choices, best_of = n): each step's newly committed prefix text of
            // each candidate as a delta of its index.
            struct Stream {
                std::mutex mu;
                std::condition_variable cv;
                std::deque<std::string> events;
                std::vector<std::string> sent;
                bool finished = false;
            };
            auto st = std::make_shared<Stream>();
            st->sent.resize(cands.size());
            // With stop sequences, the last (longest - 1) bytes are held back until it is
            // known that no stop sequence starts in them.
            size_t hold = 0;
            for (const auto& e : stop)
                hold = std::max(hold, e.size() - 1);
            for (size_t k = 0; k < cands.size(); ++k) {
                const int index = static_cast<int>(k);
                cands[k]->on_step = [st, chunk_of, stop, hold, index](const std::string& stable) {
                    std::lock_guard<std::mutex> lock(st->mu);
                    std::string& sent = st->sent[index];
                    const size_t cut = tools::find_stop(stable, stop);
                    size_t end = cut != std::string::npos ? cut
                                 : stable.size() > hold   ? stable.size() - hold
                                                          : 0;
                    // Not inside a UTF-8 character.
                    while (end > 0 && end < stable.size() &&
                           (static_cast<unsigned char>(stable[end]) & 0xC0) == 0x80)
                        --end;
                    // Only text that extends what was sent: deltas are never taken back.
                    if (end > sent.size() && stable.compare(0, sent.size(), sent) == 0) {
                        st->events.push_back(sse_data(chunk_of(
                            index, stable.substr(sent.size(), end - sent.size()), nullptr)));
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
            std::thread([&engine, cands, st, chunk_of, stop] {
                for (const auto& c : cands)
                    engine.wait(*c);
                std::lock_guard<std::mutex> lock(st->mu);
                for (size_t k = 0; k < cands.size(); ++k) {
                    const auto& c = *cands[k];
                    const int index = static_cast<int>(k);
                    if (!c.error.empty()) {
                        st->events.push_back(sse_data(json{{"error", {{"message", c.error}}}}));
                        continue;
                    }
                    const Final f = final_text(c, stop);
                    const std::string& sent = st->sent[k];
                    if (f.text.size() > sent.size() && f.text.compare(0, sent.size(), sent) == 0) {
                        st->events.push_back(
                            sse_data(chunk_of(index, f.text.substr(sent.size()), nullptr)));
                    }
                    st->events.push_back(sse_data(chunk_of(index, "", f.finish)));
                }
                st->events.push_back("data: [DONE]\n\n");
                st->finished = true;
                st->cv.notify_all();
            }).detach();
            res.set_header("Cache-Control", "no-cache");
            res.set_chunked_content_provider(
                "text/event-stream", [st, cands, &engine](size_t, httplib::DataSink& sink) {
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
        };
        srv.Post("/v1/completions",
                 [&](const httplib::Request& q, httplib::Response& s) { handle(q, s, false); });
        srv.Post("/v1/chat/completions",
                 [&](const httplib::Request& q, httplib::Response& s) { handle(q, s, true); });
        if (web_dir.empty()) web_dir = LLADA_SOURCE_WEB_DIR;
        if (web_dir != "none") {
            if (!std::filesystem::is_regular_file(std::filesystem::path(web_dir) / "index.html"))
                throw Error("--web: no index.html in '" + web_dir +
                            "' (give --web none to serve no page)");
            srv.set_mount_point("/", web_dir);
        }
        // Debian's cpp-httplib is a compiled library that listens with a backlog of 5: more
        // clients connecting at once have their connections dropped or retried a second later
        // (seen as failed requests and 1 s outliers at 32 clients). The listening socket is
        // caught as it is created and, once listening, given a backlog for every worker (Linux
        // takes a second listen() as a new backlog; the kernel caps it at somaxconn).
        int listen_fd = -1;
        srv.set_socket_options([&listen_fd](socket_t sock) {
            httplib::default_socket_options(sock);
            listen_fd = sock;
        });
        int bound = port;
        if (port == 0) {
            bound = srv.bind_to_any_port(host);
        } else if (!srv.bind_to_port(host, port)) {
            throw Error("cannot listen on " + host + ":" + std::to_string(port));
        }
        if (bound < 0) throw Error("cannot listen on " + host);
        if (listen_fd >= 0) ::listen(listen_fd, static_cast<int>(workers));
        std::fprintf(stderr,
                     "llada-server: %s on http://%s:%d (policy %s, %d parallel; KV cache %.2f MiB, "
                     "%.2f MiB per sequence of %d positions)\n",
                     model_name.c_str(), host.c_str(), bound, dec.policy.c_str(), limits.parallel,
                     engine.kv_bytes() / 1048576.0, engine.kv_bytes_per_sequence() / 1048576.0,
                     engine.n_pos());
        std::printf("listening %d\n", bound);
        std::fflush(stdout);
        std::thread stopper([&] {
            int sig = 0;
            sigwait(&stop_signals, &sig);
            std::fprintf(stderr, "llada-server: signal %d, stopping\n", sig);
            srv.stop();
        });
        srv.listen_after_bind();
        if (stopper.joinable()) {
            pthread_kill(stopper.native_handle(), SIGTERM);  // if the server stopped by itself
            stopper.join();
        }
        return 0;
    });
}
