// llada-server against clients that misbehave or leave (docs/server.md, "Limits"): bodies past
// --max-body-kib in either framing, clients that send their headers a line a second, clients
// that hang up on a request still being decoded, a SIGTERM with streams open, bodies that are
// not UTF-8, and the counters of /metrics adding up over all of it. Each test names the break
// it catches in the commit that added it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "server_util.h"
#include "tools/common.h"

using namespace llada;
using json = nlohmann::json;
using llada::test::client;
using llada::test::kClientLimitSeconds;
using llada::test::RawConnection;
using llada::test::Server;

namespace {

const char* kPrompt = "sort 56 44 46 59 52 58:";

// One counter of /metrics ("name value" on its own line); -1 when absent.
int64_t metric(const std::string& body, const std::string& name) {
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(name + " ", 0) == 0) return std::stoll(line.substr(name.size() + 1));
    }
    return -1;
}

// POSTs a JSON body; (status, body), or (0, "") with a failure when nothing answered.
std::pair<int, std::string> post_json(httplib::Client& c, const std::string& path, const json& body,
                                      const httplib::Headers& headers = {}) {
    auto r = c.Post(path.c_str(), headers, body.dump(), "application/json");
    EXPECT_TRUE(r) << path << " " << body.dump();
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
}

// The unnamed events of a server-sent stream, parsed, up to [DONE].
std::vector<json> sse_events(const std::string& stream) {
    std::vector<json> out;
    std::istringstream in(stream);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
        out.push_back(json::parse(line.substr(6)));
    }
    return out;
}

std::string metrics(int port) {
    auto r = client(port).Get("/metrics");
    return r ? r->body : "";
}

// Polls /metrics until `pred` holds or the test's own time limit passes.
template <typename Pred>
bool metrics_until(int port, Pred pred) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds);
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred(metrics(port))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

std::string chunked_post_head(const std::string& path) {
    return "POST " + path +
           " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "
           "chunked\r\n\r\n";
}

std::string chunk(const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    return size + data + "\r\n";
}

int status_of(const std::string& raw) {
    int status = 0;
    std::sscanf(raw.c_str(), "HTTP/1.1 %d", &status);
    return status;
}

std::string body_of(const std::string& raw) {
    const size_t at = raw.find("\r\n\r\n");
    return at == std::string::npos ? "" : raw.substr(at + 4);
}

}  // namespace

// cpp-httplib 0.11 checks its payload limit against Content-Length only: a chunked body was
// read whole. Both framings now stop at --max-body-kib with 413, and a chunked body within the
// limit is served as any other.
TEST(ServerLimits, BodiesPastTheLimitAre413InEitherFraming) {
    Server s({"--max-body-kib", "4"});
    ASSERT_GT(s.port, 0);
    {
        // 1 MiB in 1 KiB chunks: the answer comes after ~4 KiB, and the rest is never read (the
        // server closes, so sending it fails or is ignored).
        RawConnection c(s.port);
        ASSERT_GE(c.fd, 0);
        ASSERT_TRUE(c.send_all(chunked_post_head("/v1/completions")));
        const std::string kib(1024, ' ');
        for (int i = 0; i < 1024 && c.send_all(chunk(kib)); ++i) {
        }
        c.send_all(chunk(""));
        const std::string raw = c.read_response();
        EXPECT_EQ(status_of(raw), 413) << raw.substr(0, 300);
        EXPECT_NE(body_of(raw).find("--max-body-kib (4 KiB)"), std::string::npos) << raw;
    }
    {
        // Content-Length past the limit: refused before the body is read.
        RawConnection c(s.port);
        ASSERT_TRUE(
            c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nContent-Length: 1000000\r\n\r\n{"));
        const std::string raw = c.read_response();
        EXPECT_EQ(status_of(raw), 413) << raw.substr(0, 300);
    }
    {
        // A chunked body within the limit is a request like any other.
        RawConnection c(s.port);
        const std::string body = json{{"prompt", kPrompt}, {"max_tokens", 8}}.dump();
        // (Connection: close, so that the answer ends where the server closes; no half-close,
        // which the server takes as the client gone.)
        std::string head = chunked_post_head("/v1/completions");
        head.insert(head.size() - 2, "Connection: close\r\n");
        ASSERT_TRUE(
            c.send_all(head + chunk(body.substr(0, 10)) + chunk(body.substr(10)) + chunk("")));
        const std::string raw = c.read_response();
        EXPECT_EQ(status_of(raw), 200) << raw.substr(0, 300);
    }
    auto h = client(s.port).Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

// Thirty clients that send their request a header line at a time hold thirty connections;
// every /health probe is still answered while all of them are connected and sending (with a
// fixed pool of parallel + queue + 4 = 24 threads, none was).
TEST(ServerLimits, ClientsSlowToSendTheirHeadersDoNotStarveOthers) {
    Server s({});
    ASSERT_GT(s.port, 0);
    constexpr int kSlow = 30;
    std::atomic<bool> probes_done{false};
    std::atomic<int> connected{0}, still_sending{0};
    std::vector<std::thread> slow;
    for (int i = 0; i < kSlow; ++i) {
        slow.emplace_back([&, i] {
            RawConnection c(s.port);
            if (c.fd < 0 || !c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\n")) return;
            ++connected;
            // A header line every 200 ms (inside cpp-httplib's 5 s read timeout), until the
            // probes are done or the test's own limit passes.
            const auto deadline =
                std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds - 30);
            bool sending = true;
            for (int line = 0; !probes_done && std::chrono::steady_clock::now() < deadline;
                 ++line) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                sending = c.send_all("X-Slow-" + std::to_string(i) + ": " + std::to_string(line) +
                                     "\r\n");
                if (!sending) break;
            }
            if (sending && probes_done) ++still_sending;
        });
    }
    while (connected < kSlow)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // each has sent a line more
    int answered = 0;
    for (int i = 0; i < 8; ++i) {
        auto r = client(s.port).Get("/health");
        answered += r && r->status == 200;
    }
    probes_done = true;
    for (auto& t : slow)
        t.join();
    EXPECT_EQ(answered, 8);
    // The probes were answered while the slow clients were all still connected and sending.
    EXPECT_EQ(still_sending, kSlow);
}

// Past --max-connections a connection is answered 503 at once, naming the limit, and closed
// (it used to wait, unanswered, for a thread); once the connections holding the threads close,
// the next is served. Serving threads are held here by clients that send a header line every
// 200 ms, so no timeout decides the outcome.
TEST(ServerLimits, ConnectionsPastTheCapAre503) {
    Server s({"--max-connections", "2"});
    ASSERT_GT(s.port, 0);
    std::atomic<bool> stop{false};
    std::atomic<int> connected{0};
    std::vector<std::thread> holders;
    for (int i = 0; i < 2; ++i) {
        holders.emplace_back([&, i] {
            RawConnection c(s.port);
            if (c.fd < 0 || !c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n")) return;
            ++connected;
            const auto deadline =
                std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds - 30);
            for (int line = 0; !stop && std::chrono::steady_clock::now() < deadline; ++line) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                if (!c.send_all("X-Hold-" + std::to_string(i) + ": " + std::to_string(line) +
                                "\r\n"))
                    break;
            }
        });
    }
    while (connected < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // each has sent a line more
    std::string raw;
    {
        RawConnection c(s.port);
        ASSERT_GE(c.fd, 0);
        ASSERT_TRUE(c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
        raw = c.read_response();
    }
    stop = true;
    for (auto& t : holders)
        t.join();
    EXPECT_EQ(status_of(raw), 503) << raw.substr(0, 300);
    EXPECT_NE(body_of(raw).find("too many connections"), std::string::npos) << raw.substr(0, 300);
    EXPECT_NE(body_of(raw).find("--max-connections"), std::string::npos);
    EXPECT_NE(raw.find("Retry-After: 1"), std::string::npos);
    // The holders have closed: their threads serve again (polled within the test's limit). A
    // poll that comes before the server has released them is refused too, and counted: on a
    // loaded host the count is the probe's refusal plus those of the polls.
    int refused_polls = 0;
    std::string m;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds);
    while (std::chrono::steady_clock::now() < deadline) {
        auto r = client(s.port).Get("/metrics");
        if (r && r->status == 200) {
            m = r->body;
            break;
        }
        refused_polls += r && r->status == 503;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(m.empty()) << "the server never served /metrics again";
    EXPECT_EQ(metric(m, "llada_connections_refused_total"), 1 + refused_polls);
    auto r = client(s.port).Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
}

// A non-streamed request whose client hangs up is cancelled (its sequence freed) instead of
// decoding on for nobody: the cancellation is counted and its generation never completes.
TEST(ServerLimits, ARequestWhoseClientLeavesIsCancelled) {
    Server s({"--parallel", "1", "--queue", "0", "--max-gen", "192", "--block", "192"});
    ASSERT_GT(s.port, 0);
    {
        RawConnection c(s.port);
        const std::string body = json{
            {"prompt", kPrompt},
            {"max_tokens", 192},
            {"policy", "vanilla"},
            {"steps", 192}}.dump();
        ASSERT_TRUE(
            c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
        ASSERT_TRUE(metrics_until(s.port, [](const std::string& m) {
            return metric(m, "llada_requests_in_flight") == 1;
        }));
        c.hang_up();
    }
    std::string m;
    ASSERT_TRUE(metrics_until(s.port, [&](const std::string& got) {
        m = got;
        return metric(got, "llada_requests_cancelled_total") == 1;
    })) << m;
    EXPECT_EQ(metric(m, "llada_requests_completed_total"), 0) << m;
    EXPECT_EQ(metric(m, "llada_candidates_completed_total"), 0) << m;
    EXPECT_EQ(metric(m, "llada_requests_in_flight"), 0) << m;
}

// SIGTERM with a stream open: the stream runs to its finish chunk and [DONE], a generation
// request sent after the signal is refused with 503 (and /health says so), and the server
// then exits cleanly.
TEST(ServerLimits, SigtermDrainsOpenStreams) {
    Server s({"--parallel", "2", "--max-gen", "192", "--block", "192"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", kPrompt}, {"max_tokens", 192}, {"policy", "vanilla"},
                    {"steps", 192},      {"stream", true},    {"diffusion_events", true}}
                   .dump();
    req.set_header("Content-Type", "application/json");
    int after_status = 0, health_status = 0;
    std::string stream;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (stream.empty()) {
            kill(s.pid, SIGTERM);
            // The signal is taken by the server's own thread: ask until it has been.
            const auto deadline =
                std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds / 2);
            while (health_status != 503 && std::chrono::steady_clock::now() < deadline) {
                auto h = client(s.port).Get("/health");
                health_status = h ? h->status : 0;
            }
            auto r = client(s.port).Post("/v1/completions",
                                         json{{"prompt", kPrompt}, {"max_tokens", 8}}.dump(),
                                         "application/json");
            after_status = r ? r->status : 0;
        }
        stream.append(data, n);
        return true;
    };
    auto res = c.send(req);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(health_status, 503);
    EXPECT_EQ(after_status, 503);
    // The finish chunk (the answer may end at end-of-text, "stop", or fill max_tokens).
    EXPECT_NE(stream.find("\"finish_reason\":\""), std::string::npos)
        << stream.substr(stream.size() > 400 ? stream.size() - 400 : 0);
    EXPECT_NE(stream.find("data: [DONE]"), std::string::npos);
    const int status = s.wait_exit();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// --timeout covers a stream as it does any request: past it, the stream ends with a
// timeout_error event and [DONE] (32 forwards do not fit in 1 ms).
TEST(ServerLimits, TheTimeoutCoversStreams) {
    Server s({"--timeout", "0.001"});
    ASSERT_GT(s.port, 0);
    auto r = client(s.port).Post("/v1/completions",
                                 json{{"prompt", kPrompt},
                                      {"max_tokens", 32},
                                      {"policy", "vanilla"},
                                      {"steps", 32},
                                      {"stream", true}}
                                     .dump(),
                                 "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("\"timeout_error\""), std::string::npos) << r->body;
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
    const std::string m = metrics(s.port);
    EXPECT_EQ(metric(m, "llada_requests_timed_out_total"), 1) << m;
}

// A body that is not UTF-8 is the client's error (400, naming the byte), a malformed body is
// never echoed back whole, and each request leaves one line in the access log.
TEST(ServerLimits, BadBytesAre400AndEveryRequestIsLogged) {
    const std::string log = (std::filesystem::temp_directory_path() /
                             ("server-log-" + std::to_string(getpid()) + ".txt"))
                                .string();
    Server s({}, llada::test::test_model(), log);
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto r =
        c.Post("/v1/completions", std::string("{\"prompt\": \"caf\xe9\"}"), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find(
                  "not valid UTF-8 (at byte"),
              std::string::npos)
        << r->body;
    const std::string big = "{\"prompt\": \"" + std::string(100000, 'a') + "\" oops}";
    r = c.Post("/v1/completions", big, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_LT(r->body.size(), 1000u) << r->body.substr(0, 200);
    EXPECT_NE(r->body.find("malformed JSON"), std::string::npos);
    r = c.Post("/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 8}}.dump(),
               "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    const int tokens = json::parse(r->body)["usage"]["completion_tokens"].get<int>();
    s.stop();
    std::ifstream in(log);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        if (line.find("llada-server: POST /v1/completions") == 0) lines.push_back(line);
    std::filesystem::remove(log);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_NE(lines[0].find(" 400 "), std::string::npos) << lines[0];
    EXPECT_NE(lines[2].find(" 200 " + std::to_string(tokens) + " tokens "), std::string::npos)
        << lines[2];
}

// Fields OpenAI's clients send, llama-server's utility endpoints, and the combinations the
// command-line tools refuse (refused here too, in the request's words).
TEST(ServerApi, OpenAiFieldsUtilityEndpointsAndRefusedCombinations) {
    Server s({"--api-key", "k"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    const httplib::Headers auth = {{"Authorization", "Bearer k"}};
    auto post = [&](const std::string& path, const json& body) {
        return post_json(c, path, body, auth);
    };
    auto text_of = [](const std::string& body) {
        return json::parse(body)["choices"][0]["text"].get<std::string>();
    };
    const auto lm = tools::load_model(llada::test::test_model());
    const json base = {{"prompt", kPrompt}, {"max_tokens", 8}, {"seed", 3}};
    const auto [st0, plain] = post("/v1/completions", base);
    ASSERT_EQ(st0, 200) << plain;
    // max_completion_tokens for max_tokens, null for an absent field, [string] and token ids for
    // the prompt: the same answer.
    json alt = {{"prompt", json::array({kPrompt})},
                {"max_completion_tokens", 8},
                {"seed", 3},
                {"temperature", nullptr},
                {"stop", nullptr}};
    auto [st1, same] = post("/v1/completions", alt);
    ASSERT_EQ(st1, 200) << same;
    EXPECT_EQ(text_of(same), text_of(plain));
    alt["prompt"] = tools::problem_ids(*lm.tok, kPrompt, false);
    auto [st2, by_ids] = post("/v1/completions", alt);
    ASSERT_EQ(st2, 200) << by_ids;
    EXPECT_EQ(text_of(by_ids), text_of(plain));
    // Refused, each naming why.
    auto refused = [&](json body, const std::string& why) {
        auto [st, b] = post("/v1/completions", body);
        EXPECT_EQ(st, 400) << body.dump() << " " << b;
        EXPECT_NE(b.find(why), std::string::npos) << body.dump() << " " << b;
    };
    refused({{"prompt", {"a", "b"}}}, "holds 2 prompts");
    // The sampling filter: refused where it would be ignored (temperature 0), and at top_k 1
    // sampling at temperature 1.5 answers what greedy decoding answers (0 is "off").
    refused({{"prompt", kPrompt}, {"top_k", 5}}, "need a 'temperature' above 0");
    refused({{"prompt", kPrompt}, {"min_p", 0.1}, {"temperature", 0}}, "'temperature' above 0");
    refused({{"prompt", kPrompt}, {"min_p", 2}}, "'min_p' must be in [0, 1]");
    json filtered = base;
    filtered["top_k"] = 0;
    filtered["min_p"] = 0;
    auto [stf0, off] = post("/v1/completions", filtered);
    ASSERT_EQ(stf0, 200) << off;
    EXPECT_EQ(text_of(off), text_of(plain));
    filtered["temperature"] = 1.5;
    filtered["top_k"] = 1;
    auto [stf1, top1] = post("/v1/completions", filtered);
    ASSERT_EQ(stf1, 200) << top1;
    EXPECT_EQ(text_of(top1), text_of(plain));
    // JSON mode cannot be honoured exactly (no constrained decoding): refused, "text" taken.
    refused({{"prompt", kPrompt}, {"response_format", {{"type", "json_object"}}}},
            "'response_format' type 'json_object' is not supported");
    refused({{"prompt", kPrompt},
             {"response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}}},
            "type 'json_schema' is not supported");
    json as_text = base;
    as_text["response_format"] = {{"type", "text"}};
    auto [stt, text] = post("/v1/completions", as_text);
    ASSERT_EQ(stt, 200) << text;
    EXPECT_EQ(text_of(text), text_of(plain));
    refused({{"prompt", kPrompt}, {"threshold", 0}}, "'threshold' 0 is not a threshold");
    refused({{"prompt", kPrompt}, {"steps", 8}}, "'steps' applies to the step schedule");
    refused({{"prompt", kPrompt}, {"max_tokens", 8}, {"max_completion_tokens", 9}}, "differ");
    refused({{"prompt", kPrompt}, {"stream_options", {{"include_usage", true}}}},
            "applies to streamed requests");
    // A streamed request that fails validation is a 400 before any event, not a 200 stream.
    refused({{"prompt", kPrompt}, {"stream", true}, {"max_tokens", 100000}}, "'max_tokens'");
    // stream_options.include_usage: a last chunk without choices, with the usage, then [DONE].
    auto [st3, stream] =
        post("/v1/completions", json{{"prompt", kPrompt},
                                     {"max_tokens", 8},
                                     {"seed", 3},
                                     {"stream", true},
                                     {"stream_options", {{"include_usage", true}}}});
    ASSERT_EQ(st3, 200);
    const size_t done = stream.rfind("data: [DONE]");
    ASSERT_NE(done, std::string::npos) << stream;
    const size_t last = stream.rfind("data: {", done);
    ASSERT_NE(last, std::string::npos);
    const json usage = json::parse(stream.substr(last + 6, stream.find('\n', last) - last - 6));
    EXPECT_TRUE(usage["choices"].empty()) << usage.dump();
    EXPECT_EQ(usage["usage"]["prompt_tokens"].get<int>(),
              static_cast<int>(tools::problem_ids(*lm.tok, kPrompt, false).size()));
    // (the same request's answer as the non-streamed one's: the same seed, the same text)
    EXPECT_EQ(usage["usage"]["completion_tokens"],
              json::parse(plain)["usage"]["completion_tokens"]);
    // Role developer is the system role.
    auto [st4, chat] =
        post("/v1/chat/completions", json{{"messages",
                                           {{{"role", "developer"}, {"content", "be brief"}},
                                            {{"role", "user"}, {"content", kPrompt}}}},
                                          {"max_tokens", 8}});
    EXPECT_EQ(st4, 200) << chat;
    // /tokenize and /detokenize: the library's ids and text.
    auto [st5, tok] = post("/tokenize", json{{"content", kPrompt}});
    ASSERT_EQ(st5, 200) << tok;
    const auto ids = json::parse(tok)["tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, lm.tok->encode(kPrompt, false, false));
    auto [st6, detok] = post("/detokenize", json{{"tokens", ids}});
    ASSERT_EQ(st6, 200) << detok;
    EXPECT_EQ(json::parse(detok)["content"], kPrompt);
    auto [st7, bad] = post("/detokenize", json{{"tokens", {-1}}});
    EXPECT_EQ(st7, 400) << bad;
    // /props: the server's defaults.
    auto props = c.Get("/props", auth);
    ASSERT_TRUE(props);
    ASSERT_EQ(props->status, 200);
    const json pj = json::parse(props->body);
    EXPECT_EQ(pj["default_generation_settings"]["policy"], "dual-cache");
    EXPECT_DOUBLE_EQ(pj["default_generation_settings"]["threshold"].get<double>(), 0.9);
    // Behind the key: /metrics, /tokenize, /detokenize, /props.
    for (const char* path : {"/metrics", "/props"})
        EXPECT_EQ(c.Get(path)->status, 401) << path;
    EXPECT_EQ(c.Post("/tokenize", json{{"content", "x"}}.dump(), "application/json")->status, 401);
    // /metrics adds up: accepted = completed + failed + cancelled + timed out + in flight (the
    // plain request, its two other spellings, the two filtered ones, the "text" format, the
    // stream and the chat), the eleven refused ones counted apart (a bad /detokenize is not a
    // generation request).
    auto met = c.Get("/metrics", auth);
    ASSERT_TRUE(met);
    const std::string& m = met->body;
    const int64_t accepted = metric(m, "llada_requests_accepted_total");
    EXPECT_EQ(accepted, 8) << m;
    EXPECT_EQ(accepted, metric(m, "llada_requests_completed_total") +
                            metric(m, "llada_requests_failed_total") +
                            metric(m, "llada_requests_cancelled_total") +
                            metric(m, "llada_requests_timed_out_total") +
                            metric(m, "llada_requests_in_flight"))
        << m;
    EXPECT_EQ(metric(m, "llada_requests_invalid_total"), 11) << m;
}

// logprobs as OpenAI's clients read them, in both endpoints' spellings: one entry per answer
// token whose texts concatenate to the answer, each a log-probability (<= 0); at temperature 0
// the chosen token is its step's most likely, so it heads its top tokens with the same value.
// (decode_test.cpp: Logprobs.* holds the values to the committing forward's distribution.)
TEST(ServerApi, LogprobsInBothEndpoints) {
    Server s({});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto post = [&](const std::string& path, const json& body) { return post_json(c, path, body); };
    auto [st, body] =
        post("/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 16}, {"logprobs", 3}});
    ASSERT_EQ(st, 200) << body;
    const json a = json::parse(body);
    const json& lp = a["choices"][0]["logprobs"];
    const auto tokens = lp["tokens"].get<std::vector<std::string>>();
    ASSERT_EQ(static_cast<int>(tokens.size()), a["usage"]["completion_tokens"].get<int>()) << body;
    ASSERT_FALSE(tokens.empty());
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
        EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
        joined += tokens[i];
        const double v = lp["token_logprobs"][i];
        EXPECT_LE(v, 0.0);
        const json& top = lp["top_logprobs"][i];
        EXPECT_GE(top.size(), 1u);
        EXPECT_LE(top.size(), 3u);
        double best = -INFINITY;
        for (const auto& [t, x] : top.items())
            best = std::max(best, x.get<double>());
        EXPECT_NEAR(v, best, 1e-6) << "token " << i;
        EXPECT_NEAR(top[tokens[i]].get<double>(), v, 1e-6) << "token " << i;
    }
    EXPECT_EQ(joined, a["choices"][0]["text"].get<std::string>());
    // logprobs 0: the chosen tokens' alone, the same values.
    auto [st0, body0] =
        post("/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 16}, {"logprobs", 0}});
    ASSERT_EQ(st0, 200) << body0;
    const json a0 = json::parse(body0);
    const json& lp0 = a0["choices"][0]["logprobs"];
    EXPECT_TRUE(lp0["top_logprobs"].is_null());
    ASSERT_EQ(lp0["token_logprobs"].size(), tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
        EXPECT_NEAR(lp0["token_logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(),
                    1e-4);
    // Chat: content entries with their bytes.
    auto [stc, chat] =
        post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                                          {"max_tokens", 8},
                                          {"logprobs", true},
                                          {"top_logprobs", 2}});
    ASSERT_EQ(stc, 200) << chat;
    const json cj = json::parse(chat);
    const json& content = cj["choices"][0]["logprobs"]["content"];
    std::string text;
    for (const auto& e : content) {
        text += e["token"].get<std::string>();
        EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
        ASSERT_EQ(e["top_logprobs"].size(), 2u);
        EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
        EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(),
                    1e-6);
    }
    EXPECT_EQ(text, cj["choices"][0]["message"]["content"].get<std::string>());
    // Refused, naming why.
    auto refused = [&](const std::string& path, json b, const std::string& why) {
        auto [code, r] = post(path, b);
        EXPECT_EQ(code, 400) << b.dump() << " " << r;
        EXPECT_NE(r.find(why), std::string::npos) << b.dump() << " " << r;
    };
    refused("/v1/completions", {{"prompt", kPrompt}, {"logprobs", true}},
            "'logprobs' must be an integer in /v1/completions");
    refused("/v1/completions", {{"prompt", kPrompt}, {"logprobs", 21}}, "'logprobs' must be in");
    refused("/v1/completions", {{"prompt", kPrompt}, {"logprobs", 1}, {"revise", true}},
            "not recorded with 'revise'");
    refused("/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", kPrompt}}}}, {"top_logprobs", 2}},
            "'top_logprobs' needs 'logprobs': true");
    refused("/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", kPrompt}}}}, {"logprobs", 2}},
            "'logprobs' must be a boolean");
}

// Streamed logprobs: each chunk carries the tokens whose text it completes, never a token
// ahead of the text sent, and the chunks' entries joined are the non-streamed answer's (the
// same request at temperature 0), in both endpoints' spellings.
TEST(ServerApi, StreamedLogprobsAddUpToTheWholeAnswers) {
    Server s({});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto post = [&](const std::string& path, const json& body) { return post_json(c, path, body); };
    const json req = {{"prompt", kPrompt}, {"max_tokens", 24}, {"logprobs", 2}};
    auto [st, whole] = post("/v1/completions", req);
    ASSERT_EQ(st, 200) << whole;
    json streamed = req;
    streamed["stream"] = true;
    auto [sst, stream] = post("/v1/completions", streamed);
    ASSERT_EQ(sst, 200) << stream;
    json joined = {{"tokens", json::array()},
                   {"token_logprobs", json::array()},
                   {"top_logprobs", json::array()},
                   {"text_offset", json::array()}};
    std::string text, token_text;
    int chunks_with_tokens = 0;
    for (const json& e : sse_events(stream)) {
        ASSERT_TRUE(e.contains("choices")) << e.dump();
        if (e["choices"].empty()) continue;
        const json& ch = e["choices"][0];
        text += ch["text"].get<std::string>();
        ASSERT_TRUE(ch.contains("logprobs")) << e.dump();
        if (ch["logprobs"].is_null()) continue;
        if (!ch["logprobs"]["tokens"].empty()) ++chunks_with_tokens;
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (const auto& v : ch["logprobs"][k])
                joined[k].push_back(v);
        for (const auto& t : ch["logprobs"]["tokens"])
            token_text += t.get<std::string>();
        EXPECT_EQ(text.compare(0, token_text.size(), token_text), 0)
            << "tokens ahead of the text: " << token_text << " | " << text;
    }
    const json w = json::parse(whole);
    const json& lp = w["choices"][0]["logprobs"];
    EXPECT_EQ(text, w["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(joined["tokens"], lp["tokens"]);
    EXPECT_EQ(joined["text_offset"], lp["text_offset"]);
    ASSERT_EQ(joined["token_logprobs"].size(), lp["token_logprobs"].size());
    for (size_t i = 0; i < lp["token_logprobs"].size(); ++i) {
        EXPECT_NEAR(joined["token_logprobs"][i].get<double>(),
                    lp["token_logprobs"][i].get<double>(), 1e-6);
        EXPECT_EQ(joined["top_logprobs"][i].size(), lp["top_logprobs"][i].size());
    }
    // Streamed, not all at the end: more than one chunk carried tokens.
    EXPECT_GT(chunks_with_tokens, 1) << stream;
    // Chat: the content entries joined.
    const json creq = {{"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                       {"max_tokens", 16},
                       {"logprobs", true},
                       {"top_logprobs", 1}};
    auto [cst, cwhole] = post("/v1/chat/completions", creq);
    ASSERT_EQ(cst, 200) << cwhole;
    json cstreamed = creq;
    cstreamed["stream"] = true;
    auto [csst, cstream] = post("/v1/chat/completions", cstreamed);
    ASSERT_EQ(csst, 200) << cstream;
    json content = json::array();
    for (const json& e : sse_events(cstream)) {
        if (e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
        for (const auto& v : e["choices"][0]["logprobs"]["content"])
            content.push_back(v);
    }
    const json cw = json::parse(cwhole);
    const json& want = cw["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), want.size()) << cstream;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(content[i]["token"], want[i]["token"]);
        EXPECT_NEAR(content[i]["logprob"].get<double>(), want[i]["logprob"].get<double>(), 1e-6);
    }
}
