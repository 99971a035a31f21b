// llada-server (tools/llada_server.cpp) over HTTP: the OpenAI-shaped answers equal the library's
// generation of the same request alone, requests batched together give the same text as alone
// (the seed makes them reproducible), the stream's deltas add up to the text and end in
// "data: [DONE]", and bad requests get 400 with the problem named, a full server 503.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "decode/policy.h"
#include "decode/tts.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "runtime/device.h"
#include "server_util.h"
#include "tools/common.h"

using namespace llada;
using json = nlohmann::json;
using llada::test::client;
using llada::test::kClientLimitSeconds;
using llada::test::Server;
namespace fs = std::filesystem;

namespace {

std::string model() {
    return llada::test::test_model();
}

// The server's defaults for a request of `gen` positions: block 8, threshold 0.9, one token
// per step otherwise.
decode::GenerateOptions server_defaults(int gen = 32) {
    decode::GenerateOptions o;
    o.gen = gen;
    o.block = std::min(8, gen);
    o.steps = gen;
    o.threshold = 0.9;
    return o;
}

// A request through the library alone: its answer's text and the generation's result.
std::pair<std::string, decode::GenerateResult> run_alone(const std::string& prompt,
                                                         const decode::GenerateOptions& o,
                                                         const std::string& policy = "dual-cache") {
    auto lm = tools::load_model(model());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    auto r = decode::make_policy(policy, *lm.model, *dev, o, lm.ids)
                 ->generate(lm.tok->encode(prompt, lm.tok->add_bos_default(), false));
    std::string text = lm.tok->decode(r.answer(lm.ids), false);
    return {std::move(text), std::move(r)};
}

// The same request through the library alone (the server's defaults: dual-cache, threshold 0.9,
// block 8, 32 positions, one token per step otherwise).
std::string alone(const std::string& prompt, uint64_t seed, double temperature,
                  const std::string& policy = "dual-cache", int gen = 32, double threshold = 0.9,
                  int lookahead = -1) {
    decode::GenerateOptions o = server_defaults(gen);
    o.threshold = threshold;
    o.seed = seed;
    o.temperature = temperature;
    o.lookahead = lookahead;
    return run_alone(prompt, o, policy).first;
}

// The same at T 1.0 with its answer's mean committed confidence (test-time scaling's ranking).
std::pair<std::string, double> alone_with_confidence(const std::string& prompt, uint64_t seed) {
    decode::GenerateOptions o = server_defaults();
    o.seed = seed;
    o.temperature = 1.0;
    const auto [text, r] = run_alone(prompt, o);
    return {text, r.mean_confidence()};
}

// A revising request alone (the server's defaults, `revise` on) with its checks after the last
// block on the dense device: its text, its forwards and the steps it ran past its last block.
struct RevisedAlone {
    std::string text;
    int64_t forwards = 0;
    int tail_steps = 0;
};
RevisedAlone alone_revised_tail_dense(const std::string& prompt) {
    decode::GenerateOptions o = server_defaults();
    o.revise.on = true;
    o.revise.tail_dense = true;
    const auto [text, r] = run_alone(prompt, o);
    RevisedAlone out{text, r.stats.forwards, 0};
    for (const decode::StepInfo& st : r.steps)
        out.tail_steps += !st.dense;
    return out;
}

// The shipped model's file without its chat template.
std::string model_without_chat_format() {
    const auto out = fs::temp_directory_path() / ("no-chat-" + std::to_string(getpid()) + ".gguf");
    auto f = format::GgufFile::open(model());
    format::GgufWriter w;
    for (const auto& kv : f->kvs()) {
        if (kv.key != "tokenizer.chat_template") w.copy_kv(kv);
    }
    for (const auto& t : f->tensors()) {
        w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims),
                     std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    w.write(out.string());
    return out.string();
}

const char* kPrompts[] = {
    "sort 56 44 46 59 52 58:", "2889+8183=", "sort 65 56 63 72 59 58:", "6238+0032="};

}  // namespace

// ar and dream are steppers like the diffusion policies: the server batches their requests
// with the others', and each answers as the library does alone.
TEST(Server, ArAndDreamAnswerAsAloneWhenBatched) {
    const std::string ar_model =
        (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-ar-m.gguf").string();
    auto run_alone = [](const std::string& path, const std::string& policy, const char* prompt,
                        uint64_t seed, int gen) {
        auto lm = tools::load_model(path);
        runtime::ThreadPool pool(1);
        auto dev = runtime::make_cpu_device(pool);
        decode::GenerateOptions o;
        o.gen = gen;
        o.steps = gen;
        o.seed = seed;
        o.temperature = 1.0;
        auto p = decode::make_policy(policy, *lm.model, *dev, o, lm.ids);
        const auto r = p->generate(lm.tok->encode(prompt, lm.tok->add_bos_default(), false));
        return lm.tok->decode(r.answer(lm.ids), false);
    };
    auto post_all = [](int port, const std::vector<json>& bodies) {
        std::vector<std::string> got(bodies.size());
        std::vector<std::thread> ts;
        for (size_t i = 0; i < bodies.size(); ++i) {
            ts.emplace_back([&, i] {
                httplib::Client ci = client(port);
                auto r = ci.Post("/v1/completions", bodies[i].dump(), "application/json");
                if (!r) {
                    got[i] = "no response";
                } else if (r->status != 200) {
                    got[i] = r->body;
                } else {
                    got[i] = json::parse(r->body)["choices"][0]["text"];
                }
            });
        }
        for (auto& t : ts)
            t.join();
        return got;
    };
    {
        // An AR model's server: its default policy is ar.
        Server s({"--parallel", "4"}, ar_model);
        ASSERT_GT(s.port, 0);
        std::vector<json> bodies;
        for (int i = 0; i < 4; ++i) {
            bodies.push_back({{"prompt", kPrompts[i]},
                              {"max_tokens", 24 + 2 * i},
                              {"temperature", 1.0},
                              {"seed", 30 + i}});
        }
        const auto got = post_all(s.port, bodies);
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(got[i], run_alone(ar_model, "ar", kPrompts[i], 30 + i, 24 + 2 * i))
                << kPrompts[i];
        }
    }
    const std::string llada_model =
        (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-m.gguf").string();
    Server s({"--parallel", "4"});
    ASSERT_GT(s.port, 0);
    std::vector<json> bodies;
    for (int i = 0; i < 4; ++i) {
        json b = {
            {"prompt", kPrompts[i]}, {"max_tokens", 32}, {"temperature", 1.0}, {"seed", 40 + i}};
        if (i % 2 == 0) b["policy"] = "dream";
        bodies.push_back(b);
    }
    const auto got = post_all(s.port, bodies);
    for (int i = 0; i < 4; ++i) {
        const std::string want = i % 2 == 0
                                     ? run_alone(llada_model, "dream", kPrompts[i], 40 + i, 32)
                                     : alone(kPrompts[i], 40 + i, 1.0);
        EXPECT_EQ(got[i], want) << kPrompts[i];
    }
}

// LLaDA 2.x on the server (policy llada2, the default for a block-causal model): LLaDA2.0's and
// LLaDA2.1's requests batched in one scheduler answer what each answers alone (their steps are
// checked against the reference's trajectories in llada2_decode_test), and a block other than
// the session's attention blocks is refused.
TEST(Server, Llada2RequestsAnswerAsAloneWhenBatched) {
    const std::string model = (fs::path(LLADA_TEST_DATA) / "llada2" / "llada2-tiny.gguf").string();
    Server s({"--parallel", "2", "--block", "32", "--max-gen", "32"}, model);
    ASSERT_GT(s.port, 0);
    const std::vector<json> bodies = {
        {{"prompt", "sort 3 1 2:"}, {"max_tokens", 24}, {"threshold", 0.5}},
        {{"prompt", "add 12 34:"},
         {"max_tokens", 20},
         {"editing_threshold", 0.002},
         {"max_post_steps", 3}}};
    // "ok: TEXT", or the status and body of a refusal.
    auto post = [&](const json& body) {
        httplib::Client c = client(s.port);
        auto r = c.Post("/v1/completions", body.dump(), "application/json");
        if (!r) return std::string("no response");
        if (r->status != 200) return std::to_string(r->status) + " " + r->body;
        return "ok: " + json::parse(r->body)["choices"][0]["text"].get<std::string>();
    };
    std::vector<std::string> alone;
    for (const auto& b : bodies)
        alone.push_back(post(b));
    std::vector<std::string> batched(bodies.size());
    std::vector<std::thread> ts;
    for (size_t i = 0; i < bodies.size(); ++i)
        ts.emplace_back([&, i] { batched[i] = post(bodies[i]); });
    for (auto& t : ts)
        t.join();
    for (size_t i = 0; i < bodies.size(); ++i) {
        EXPECT_EQ(alone[i].rfind("ok: ", 0), 0u) << alone[i];
        EXPECT_EQ(batched[i], alone[i]) << i;
    }
    const std::string wrong = post({{"prompt", "x"}, {"max_tokens", 8}, {"block", 8}});
    EXPECT_EQ(wrong.rfind("400 ", 0), 0u) << wrong;
    EXPECT_NE(wrong.find("decodes in the attention blocks of the session (32 positions"),
              std::string::npos)
        << wrong;
}

TEST(Server, AnswersAreTheLibrarysAloneOrBatched) {
    Server s({"--parallel", "4"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto h = c.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    auto m = c.Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "tiny-llada-m");
    // Four requests at once (one forward per step for all), T 1.0 with a seed each.
    std::vector<std::string> got(4);
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i) {
        ts.emplace_back([&, i] {
            httplib::Client ci = client(s.port);
            const json body = {{"prompt", kPrompts[i]},
                               {"max_tokens", 32},
                               {"temperature", 1.0},
                               {"seed", 10 + i}};
            auto r = ci.Post("/v1/completions", body.dump(), "application/json");
            if (r && r->status == 200) got[i] = json::parse(r->body)["choices"][0]["text"];
        });
    }
    for (auto& t : ts)
        t.join();
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(got[i], alone(kPrompts[i], 10 + i, 1.0)) << kPrompts[i];
    // Requests of different policies and lengths in one step: each still gives its text alone.
    // (mbsd with a fixed lookahead: auto sizes it from a timing, which varies between runs.)
    struct Mixed {
        std::string policy;
        int gen;
        double threshold;
        int lookahead;
    };
    const Mixed mixed[] = {{"vanilla", 32, 0.0, -1},
                           {"threshold", 16, 0.7, -1},
                           {"need", 24, 0.9, -1},
                           {"mbsd", 32, 0.9, 8}};
    std::vector<std::string> got_mixed(4);
    ts.clear();
    for (int i = 0; i < 4; ++i) {
        ts.emplace_back([&, i] {
            httplib::Client ci = client(s.port);
            json body = {{"prompt", kPrompts[i]},
                         {"max_tokens", mixed[i].gen},
                         {"policy", mixed[i].policy},
                         {"temperature", 1.0},
                         {"seed", 20 + i}};
            if (mixed[i].threshold > 0) body["threshold"] = mixed[i].threshold;
            auto r = ci.Post("/v1/completions", body.dump(), "application/json");
            if (r && r->status == 200) got_mixed[i] = json::parse(r->body)["choices"][0]["text"];
        });
    }
    for (auto& t : ts)
        t.join();
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(got_mixed[i], alone(kPrompts[i], 20 + i, 1.0, mixed[i].policy, mixed[i].gen,
                                      mixed[i].threshold, mixed[i].lookahead))
            << mixed[i].policy;
    }
    // mbsd's lookahead auto is sized from the host's forward cost, measured at the first such
    // request.
    auto la = c.Post("/v1/completions",
                     json{{"prompt", kPrompts[0]}, {"max_tokens", 32}, {"policy", "mbsd"}}.dump(),
                     "application/json");
    ASSERT_TRUE(la);
    EXPECT_EQ(la->status, 200) << la->body;
    // usage counts the prompt and the answer.
    auto r = c.Post("/v1/completions", json{{"prompt", kPrompts[0]}, {"max_tokens", 32}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], alone(kPrompts[0], 0, 0.0));
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
    EXPECT_EQ(j["usage"]["total_tokens"].get<int>(),
              j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>());
    auto met = c.Get("/metrics");
    ASSERT_TRUE(met);
    EXPECT_NE(met->body.find("llada_requests_completed_total 10"), std::string::npos) << met->body;
}

// The shipped model declares the plain chat format: a chat whose user message is a task prompt
// answers as the completion of that prompt. A model without a chat format answers chat requests
// with 400 and the reason, and still serves completions.
TEST(Server, ChatUsesTheFilesFormatAndAModelWithoutOneSays400) {
    {
        Server s({});
        ASSERT_GT(s.port, 0);
        httplib::Client c = client(s.port);
        auto r = c.Post(
            "/v1/chat/completions",
            json{{"messages", {{{"role", "user"}, {"content", kPrompts[1]}}}}, {"max_tokens", 32}}
                .dump(),
            "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        EXPECT_EQ(j["object"], "chat.completion");
        EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
        EXPECT_EQ(j["choices"][0]["message"]["content"], alone(kPrompts[1], 0, 0.0));
        // Content as an array of text parts is the same message.
        r = c.Post(
            "/v1/chat/completions",
            json{{"messages",
                  {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", kPrompts[1]}}}}}}},
                 {"max_tokens", 32}}
                .dump(),
            "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"],
                  alone(kPrompts[1], 0, 0.0));
        auto err = [&](const json& messages) {
            auto e = c.Post("/v1/chat/completions", json{{"messages", messages}}.dump(),
                            "application/json");
            if (!e) return std::string("no response");
            EXPECT_EQ(e->status, 400) << messages.dump();
            return json::parse(e->body)["error"]["message"].get<std::string>();
        };
        EXPECT_NE(err(json::array()).find("'messages' must be a non-empty array"),
                  std::string::npos);
        EXPECT_NE(err({{{"content", "x"}}}).find("'messages[0].role' must be a string"),
                  std::string::npos);
        EXPECT_NE(err({{{"role", "user"}, {"content", 5}}}).find("'messages[0].content' must be"),
                  std::string::npos);
        EXPECT_NE(err({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}})
                      .find("only text is supported"),
                  std::string::npos);
        // A part whose "type" is not a string is the same 400, not a type error (the fuzzer's
        // fuzz/regressions/request/content-part-type-number.json).
        EXPECT_NE(err({{{"role", "user"}, {"content", {{{"type", 0}, {"text", "t"}}}}}})
                      .find("only text is supported"),
                  std::string::npos);
        EXPECT_NE(err({{{"role", "wizard"}, {"content", "x"}}}).find("role 'wizard'"),
                  std::string::npos);
    }
    const std::string bare = model_without_chat_format();
    {
        Server s({}, bare);
        ASSERT_GT(s.port, 0);
        httplib::Client c = client(s.port);
        auto r = c.Post("/v1/chat/completions",
                        json{{"messages", {{{"role", "user"}, {"content", kPrompts[1]}}}}}.dump(),
                        "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 400);
        const std::string msg = json::parse(r->body)["error"]["message"];
        EXPECT_NE(msg.find("no chat format"), std::string::npos) << msg;
        EXPECT_NE(msg.find("tokenizer.chat_template"), std::string::npos) << msg;
        r = c.Post("/v1/completions", json{{"prompt", kPrompts[1]}, {"max_tokens", 32}}.dump(),
                   "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
        EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], alone(kPrompts[1], 0, 0.0));
    }
    fs::remove(bare);
}

// The stream's text deltas, concatenated, and the last chunk's finish_reason.
std::pair<std::string, std::string> stream_text(const std::string& body) {
    std::string text, finish;
    for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
        const size_t end = body.find("\n\n", at);
        const std::string d = body.substr(at + 6, end - at - 6);
        at = end;
        if (d == "[DONE]") break;
        const json j = json::parse(d);
        text += j["choices"][0]["text"].get<std::string>();
        if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
    }
    return {text, finish};
}

// `n` choices come from candidates decoded together (test-time scaling): choice k is the library's
// generation alone with seed + k, streamed or not; `best_of` candidates give the n best by the
// request's `select` rule (mean committed confidence by default, or the vote), which
// `candidate` names; impossible combinations are named.
TEST(Server, NChoicesAreTheCandidatesAndBestOfRanksThem) {
    Server s({"--parallel", "4"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    const json base = {
        {"prompt", kPrompts[0]}, {"max_tokens", 32}, {"temperature", 1.0}, {"seed", 40}};
    json b = base;
    b["n"] = 3;
    auto r = c.Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    ASSERT_EQ(j["choices"].size(), 3u);
    std::vector<std::string> want;
    for (int k = 0; k < 3; ++k)
        want.push_back(alone(kPrompts[0], 40 + k, 1.0));
    for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(j["choices"][k]["index"], k);
        EXPECT_EQ(j["choices"][k]["text"], want[k]) << k;
        EXPECT_EQ(j["choices"][k]["candidate"], k);
    }
    // Streamed: each index's deltas add up to its text and each ends with a finish_reason.
    b["stream"] = true;
    r = c.Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<std::string> streamed(3), finish(3);
    for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos;) {
        const size_t end = r->body.find("\n\n", at);
        const std::string d = r->body.substr(at + 6, end - at - 6);
        at = end;
        if (d == "[DONE]") break;
        const json e = json::parse(d);
        const int k = e["choices"][0]["index"];
        ASSERT_LT(k, 3);
        streamed[k] += e["choices"][0]["text"].get<std::string>();
        if (!e["choices"][0]["finish_reason"].is_null())
            finish[k] = e["choices"][0]["finish_reason"];
    }
    for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(streamed[k], want[k]) << k;
        EXPECT_FALSE(finish[k].empty()) << k;
    }
    // best_of 4, n 2: the two most confident of the four candidates, in that order.
    std::vector<double> conf;
    std::vector<std::string> texts;
    for (int k = 0; k < 4; ++k) {
        const auto [text, confidence] = alone_with_confidence(kPrompts[0], 40 + k);
        texts.push_back(text);
        conf.push_back(confidence);
    }
    const int first = decode::select_by_confidence(conf);
    std::vector<double> rest = conf;
    rest[first] = -1.0;
    const int second = decode::select_by_confidence(rest);
    json bo = base;
    bo["n"] = 2;
    bo["best_of"] = 4;
    r = c.Post("/v1/completions", bo.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json jb = json::parse(r->body);
    ASSERT_EQ(jb["choices"].size(), 2u);
    EXPECT_EQ(jb["choices"][0]["candidate"], first);
    EXPECT_EQ(jb["choices"][0]["text"], texts[first]);
    EXPECT_EQ(jb["choices"][1]["candidate"], second);
    // By vote: the choice is a candidate whose text the most candidates gave.
    bo["n"] = 1;
    bo["select"] = "vote";
    r = c.Post("/v1/completions", bo.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["candidate"], decode::select_by_vote(texts, conf));
    // Named errors.
    auto err = [&](json body) {
        auto e = c.Post("/v1/completions", body.dump(), "application/json");
        return e && e->status == 400 ? json::parse(e->body)["error"]["message"].get<std::string>()
                                     : std::string("no 400");
    };
    json e1 = base;
    e1["n"] = 5;
    EXPECT_NE(err(e1).find("'n' must be in [1, 4]"), std::string::npos);
    json e2 = base;
    e2["n"] = 3;
    e2["best_of"] = 2;
    EXPECT_NE(err(e2).find("'best_of' (2) must be at least 'n' (3)"), std::string::npos);
    json e3 = base;
    e3["n"] = 1;
    e3["best_of"] = 3;
    e3["stream"] = true;
    EXPECT_NE(err(e3).find("cannot be streamed"), std::string::npos);
    json e4 = base;
    e4["select"] = "vote";
    EXPECT_NE(err(e4).find("'select' ranks candidates when 'best_of' exceeds 'n'"),
              std::string::npos);
    json e5 = base;
    e5["best_of"] = 2;
    e5["select"] = "longest";
    EXPECT_NE(err(e5).find("'select' must be"), std::string::npos);
}

// `stop`: the answer is the request's text without stop alone cut before the first stop
// sequence, streamed or not (the stream holds back what could begin one). The sampling fields are
// accepted only at their "off" values.
TEST(Server, StopSequencesCutTheTextAndEndTheRequest) {
    Server s({});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    for (const char* prompt : {kPrompts[0], kPrompts[2]}) {
        const std::string full = alone(prompt, 0, 0.0);
        ASSERT_GE(full.size(), 8u) << full;
        // A stop sequence from the middle of the answer, and one that never occurs.
        const std::string stop = full.substr(full.size() / 2, 3);
        const std::string want = full.substr(0, full.find(stop));
        const json body = {{"prompt", prompt}, {"max_tokens", 32}, {"stop", {"@@", stop}}};
        auto r = c.Post("/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        EXPECT_EQ(j["choices"][0]["text"], want) << "stop " << stop;
        EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
        EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), static_cast<int>(full.size()));
        json sb = body;
        sb["stream"] = true;
        r = c.Post("/v1/completions", sb.dump(), "application/json");
        ASSERT_TRUE(r);
        const auto [text, finish] = stream_text(r->body);
        EXPECT_EQ(text, want) << "stop " << stop;
        EXPECT_EQ(finish, "stop");
        // Without a match nothing is cut.
        r = c.Post(
            "/v1/completions",
            json{{"prompt", prompt}, {"max_tokens", 32}, {"stop", "@@"}, {"stream", true}}.dump(),
            "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(stream_text(r->body).first, full);
    }
    auto err = [&](const json& extra) {
        json b = {{"prompt", kPrompts[0]}};
        b.update(extra);
        auto e = c.Post("/v1/completions", b.dump(), "application/json");
        if (!e) return std::string("no response");
        EXPECT_EQ(e->status, 400) << b.dump();
        return json::parse(e->body)["error"]["message"].get<std::string>();
    };
    EXPECT_NE(err({{"stop", {""}}}).find("'stop' must be"), std::string::npos);
    EXPECT_NE(err({{"stop", {"a", "b", "c", "d", "e"}}}).find("at most 4"), std::string::npos);
    EXPECT_NE(err({{"stop", 3}}).find("'stop' must be"), std::string::npos);
    EXPECT_NE(err({{"top_p", 0.5}}).find("'top_p' other than 1"), std::string::npos);
    EXPECT_NE(err({{"presence_penalty", 1}}).find("not supported"), std::string::npos);
    auto ok = c.Post("/v1/completions",
                     json{{"prompt", kPrompts[0]},
                          {"top_p", 1},
                          {"frequency_penalty", 0},
                          {"user", "u1"},
                          {"stop", nullptr}}
                         .dump(),
                     "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST(Server, StreamDeltasAddUpToTheTextAndEndInDone) {
    Server s({});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto r = c.Post("/v1/completions",
                    json{{"prompt", kPrompts[2]}, {"max_tokens", 32}, {"stream", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    std::string text, last;
    size_t at = 0;
    int chunks = 0;
    while ((at = r->body.find("data: ", at)) != std::string::npos) {
        const size_t end = r->body.find("\n\n", at);
        last = r->body.substr(at + 6, end - at - 6);
        at = end;
        if (last == "[DONE]") break;
        text += json::parse(last)["choices"][0]["text"].get<std::string>();
        ++chunks;
    }
    EXPECT_EQ(last, "[DONE]");
    EXPECT_GT(chunks, 2);  // the text arrived over several steps
    EXPECT_EQ(text, alone(kPrompts[2], 0, 0.0));
    EXPECT_EQ(r->body.find("event: llada.step"), std::string::npos);  // not asked for
    // Opt-in diffusion events: one per step, named, each position's text and state; at the
    // end every generated position is stable.
    auto e = c.Post("/v1/completions",
                    json{{"prompt", kPrompts[2]},
                         {"max_tokens", 32},
                         {"stream", true},
                         {"diffusion_events", true}}
                        .dump(),
                    "application/json");
    ASSERT_TRUE(e);
    std::map<int, std::string> state;
    int events = 0;
    for (size_t at = 0;
         (at = e->body.find("event: llada.step\ndata: ", at)) != std::string::npos;) {
        at += 24;
        const json ev = json::parse(e->body.substr(at, e->body.find("\n\n", at) - at));
        EXPECT_EQ(ev["step"].get<int>(), ++events);
        for (const auto& ch : ev["changes"])
            state[ch["i"].get<int>()] = ch["state"];
    }
    EXPECT_GT(events, 2);
    EXPECT_EQ(state.size(), 32u);
    for (const auto& [i, s] : state)
        EXPECT_EQ(s, "stable") << i;
}

TEST(Server, BadRequestsAreNamedAndAFullServerSays503) {
    Server s({"--parallel", "1", "--queue", "0"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    auto err = [&](const std::string& body) {
        auto r = c.Post("/v1/completions", body, "application/json");
        if (!r) return std::string("no response");
        EXPECT_EQ(r->status, 400) << body;
        return json::parse(r->body)["error"]["message"].get<std::string>();
    };
    EXPECT_NE(err("{bad").find("malformed JSON"), std::string::npos);
    EXPECT_NE(err(R"({"prompt": 3})").find("'prompt' must be a string"), std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "max_tokens": "many"})").find("'max_tokens' must be a number"),
              std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "wings": 2})").find("unknown field 'wings'"),
              std::string::npos);
    // Ranges are printed as the numbers they are: no "1.000000".
    const std::string range = err(R"({"prompt": "x", "max_tokens": 999})");
    EXPECT_NE(range.find("'max_tokens' must be in [1, "), std::string::npos) << range;
    EXPECT_EQ(range.find(".000000"), std::string::npos) << range;
    EXPECT_NE(
        err(R"({"prompt": "x", "temperature": 101})").find("'temperature' must be in [0, 100]"),
        std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "threshold": 1.5})").find("must be in [0, 1]"),
              std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "max_tokens": 1.5})").find("'max_tokens' must be an integer"),
              std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "policy": "need", "lookahead": 4})")
                  .find("'lookahead' applies to policy mbsd, not need"),
              std::string::npos);
    const std::string nope = err(R"({"prompt": "x", "policy": "nope"})");
    EXPECT_NE(nope.find("'policy' 'nope' is not one of"), std::string::npos) << nope;
    EXPECT_NE(nope.find("dual-cache"), std::string::npos) << nope;
    EXPECT_NE(err(R"({"prompt": "x", "stream": true, "diffusion_events": "yes"})")
                  .find("'diffusion_events' must be a boolean"),
              std::string::npos);
    // The decoder's combination checks in the request's own words, not command-line flags.
    const std::string steps =
        err(R"({"prompt": "x", "policy": "vanilla", "max_tokens": 32, "block": 16, "steps": 7})");
    EXPECT_NE(steps.find("'steps' 7 is not a multiple of the 2 blocks ('max_tokens' 32"),
              std::string::npos)
        << steps;
    EXPECT_EQ(steps.find("--"), std::string::npos) << steps;
    EXPECT_NE(err(R"({"prompt": "x", "policy": "vanilla", "threshold": 0.5})")
                  .find("'threshold' applies to the parallel policies"),
              std::string::npos);
    EXPECT_NE(err(R"({"prompt": "x", "policy": "vanilla", "revise": true})")
                  .find("'revise' needs a policy that commits early"),
              std::string::npos);
    EXPECT_NE(
        err(R"({"prompt": "x", "policy": "dream", "threshold": 0.5})")
            .find("'threshold' applies to the policies prefix-cache, dual-cache, threshold, need, "
                  "mbsd, pipeline, llada2, not dream"),
        std::string::npos);
    EXPECT_NE(
        err(R"({"prompt": "x", "policy": "ar", "steps": 4})")
            .find("'steps' applies to the policies vanilla, prefix-cache, dual-cache, need, mbsd, "
                  "dream, not ar"),
        std::string::npos);
    // The model decides what ar can run: this server's is bidirectional.
    EXPECT_NE(err(R"({"prompt": "x", "policy": "ar"})").find("policy 'ar' needs an autoregressive"),
              std::string::npos);
    // The server's default threshold (for dual-cache) does not make vanilla an error.
    auto v = c.Post("/v1/completions",
                    json{{"prompt", kPrompts[0]}, {"max_tokens", 32}, {"policy", "vanilla"}}.dump(),
                    "application/json");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->status, 200) << v->body;
    // One sequence and no queue: of several requests at once, the ones that find it busy get
    // 503 with Retry-After; every one is answered.
    std::atomic<int> ok{0}, busy{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 6; ++i) {
        ts.emplace_back([&] {
            httplib::Client ci = client(s.port);
            auto r = ci.Post("/v1/completions",
                             json{{"prompt", kPrompts[0]},
                                  {"max_tokens", 32},
                                  {"steps", 32},
                                  {"policy", "vanilla"}}
                                 .dump(),
                             "application/json");
            if (!r) return;
            if (r->status == 200) ++ok;
            if (r->status == 503 && r->get_header_value("Retry-After") == "1") ++busy;
        });
    }
    for (auto& t : ts)
        t.join();
    EXPECT_EQ(ok + busy, 6);
    EXPECT_GE(ok, 1);
}

// One sequence and no queue: while a request holds the sequence, another gets 503 with
// Retry-After, and the first is answered whole. The holder is a stream of 192 one-token steps
// and the second request is sent from inside its first chunk, so it arrives with ~191 forwards
// of the holder still to run, however fast or slow the host.
TEST(Server, AFullServerSays503) {
    Server s({"--parallel", "1", "--queue", "0", "--max-gen", "192", "--block", "192"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", kPrompts[0]}, {"max_tokens", 192}, {"policy", "vanilla"},
                    {"steps", 192},          {"stream", true},    {"diffusion_events", true}}
                   .dump();
    req.set_header("Content-Type", "application/json");
    int probe_status = 0;
    std::string retry_after, stream;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (stream.empty()) {
            httplib::Client p = client(s.port);
            auto r =
                p.Post("/v1/completions", json{{"prompt", kPrompts[1]}, {"max_tokens", 8}}.dump(),
                       "application/json");
            if (r) {
                probe_status = r->status;
                retry_after = r->get_header_value("Retry-After");
            }
        }
        stream.append(data, n);
        return true;
    };
    auto res = c.send(req);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(probe_status, 503);
    EXPECT_EQ(retry_after, "1");
    EXPECT_NE(stream.find("data: [DONE]"), std::string::npos) << stream.substr(0, 200);
    // Once the holder is done the sequence is free again.
    auto r = c.Post("/v1/completions", json{{"prompt", kPrompts[1]}, {"max_tokens", 8}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}

TEST(Server, ApiKeyTimeoutUnknownEndpointsAndACleanStop) {
    Server s({"--api-key", "sesame", "--timeout", "0.001"});
    ASSERT_GT(s.port, 0);
    httplib::Client c = client(s.port);
    const std::string body = json{
        {"prompt", kPrompts[0]},
        {"max_tokens", 32},
        {"policy", "vanilla"},
        {"steps", 32}}.dump();
    auto r = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
    EXPECT_EQ(c.Get("/health")->status, 200);  // outside /v1/ no key is needed
    httplib::Headers auth = {{"Authorization", "Bearer sesame"}};
    r = c.Post("/v1/completions", auth, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 408);  // 32 forwards do not fit in 1 ms
    EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("--timeout"),
              std::string::npos);
    auto nf = c.Get("/v2/nothing", auth);
    ASSERT_TRUE(nf);
    EXPECT_EQ(nf->status, 404);
    EXPECT_EQ(json::parse(nf->body)["error"]["message"], "no such endpoint: GET /v2/nothing");
    const int status = s.stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A client that goes away mid-stream cancels its request: with one sequence and no queue, a
// later request is served (not refused) once the server has noticed.
TEST(Server, ADisconnectedStreamFreesItsSlot) {
    Server s({"--parallel", "1", "--queue", "0"});
    ASSERT_GT(s.port, 0);
    const std::string slow =
        json{{"prompt", kPrompts[0]}, {"max_tokens", 32}, {"policy", "vanilla"},
             {"steps", 32},           {"stream", true},   {"diffusion_events", true}}
            .dump();
    {
        httplib::Client c = client(s.port);
        int chunks = 0;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = slow;
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
            return ++chunks < 2;  // hang up after the first chunk
        };
        c.send(req);
        EXPECT_GE(chunks, 1);
    }
    // The server notices at its next write, one step later: asked again until then (503s), up
    // to the test's own time limit rather than a count of tries that a slow host can outlast.
    httplib::Client c = client(s.port);
    int status = 0;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(kClientLimitSeconds);
    while (status != 200 && std::chrono::steady_clock::now() < deadline) {
        auto r = c.Post("/v1/completions", json{{"prompt", kPrompts[1]}, {"max_tokens", 32}}.dump(),
                        "application/json");
        status = r ? r->status : 0;
        if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(status, 200);
}

// Under --cfg every request holds two sequences (the conditional and the unconditional
// canvas): with --parallel 2 one request runs at a time and the others wait in the queue
// instead of failing; each answer is the one the same request gets alone.
// A request takes the rows its policy asks for of the shared session (decode::session_shape):
// pipeline checks need two rows per position, so two such requests that would overflow the
// session's rows together are run one after the other, each answering as alone, and one that
// could never fit fails naming the rows.
TEST(Server, RequestsTakeTheirPolicysRowsOfTheSharedSession) {
    const char* prompts[] = {"2889+8183=", "6238+0032="};
    Server s({"--parallel", "2", "--max-prompt", "16"});
    ASSERT_GT(s.port, 0);
    auto body = [&](int i) {
        return json{{"prompt", prompts[i]}, {"max_tokens", 32}, {"policy", "pipeline"}}.dump();
    };
    std::vector<int> status(2, 0);
    std::vector<std::string> got(2);
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; ++i) {
        ts.emplace_back([&, i] {
            httplib::Client ci = client(s.port);
            auto r = ci.Post("/v1/completions", body(i), "application/json");
            if (!r) return;
            status[i] = r->status;
            got[i] = r->status == 200
                         ? json::parse(r->body)["choices"][0]["text"].get<std::string>()
                         : r->body;
        });
    }
    for (auto& t : ts)
        t.join();
    httplib::Client c = client(s.port);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(status[i], 200) << got[i];
        auto r = c.Post("/v1/completions", body(i), "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(got[i], json::parse(r->body)["choices"][0]["text"].get<std::string>());
    }
    Server one({"--parallel", "1", "--max-prompt", "16"});
    ASSERT_GT(one.port, 0);
    httplib::Client c1 = client(one.port);
    auto r = c1.Post("/v1/completions", body(0), "application/json");
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("window rows per step; this server has 48"), std::string::npos)
        << r->body;
}

// --revise-tail dense: the checks after a request's last block run as a forward of the dense
// device, in scratch slots the shared session holds for every sequence. Two revising requests
// batched answer as each does alone with the same setting, and as a server without it (on the
// cpu device the dense device's checks decide what the CPU path's would).
TEST(Server, ReviseTailDenseAnswersAsAlone) {
    const char* prompts[] = {"2889+8183=", "sort 65 56 63 72 59 58:"};
    std::vector<RevisedAlone> want;
    int tail_steps = 0;
    for (const char* prompt : prompts) {
        want.push_back(alone_revised_tail_dense(prompt));
        tail_steps += want.back().tail_steps;
    }
    ASSERT_GT(tail_steps, 0) << "no check ran after a last block: the test exercises nothing";
    auto body = [&](int i) {
        return json{{"prompt", prompts[i]}, {"max_tokens", 32}, {"revise", true}}.dump();
    };
    Server s({"--parallel", "2", "--max-prompt", "32", "--revise", "--revise-tail", "dense"});
    ASSERT_GT(s.port, 0);
    std::vector<json> got(2);
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; ++i) {
        ts.emplace_back([&, i] {
            httplib::Client ci = client(s.port);
            auto r = ci.Post("/v1/completions", body(i), "application/json");
            if (r) got[i] = r->status == 200 ? json::parse(r->body) : json{{"error", r->body}};
        });
    }
    for (auto& t : ts)
        t.join();
    // The checks after the last block are forwards of the dense device there (nfe counts them),
    // and of the CPU path on a server without the flag (nfe does not).
    Server cpu_tail({"--parallel", "1", "--max-prompt", "32"});
    ASSERT_GT(cpu_tail.port, 0);
    httplib::Client c = client(cpu_tail.port);
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(got[i].contains("choices")) << got[i].dump();
        EXPECT_EQ(got[i]["choices"][0]["text"], want[i].text) << prompts[i];
        EXPECT_EQ(got[i]["nfe"], want[i].forwards) << prompts[i];
        auto r = c.Post("/v1/completions", body(i), "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        EXPECT_EQ(j["choices"][0]["text"], want[i].text) << prompts[i];
        EXPECT_EQ(j["nfe"], want[i].forwards - want[i].tail_steps) << prompts[i];
    }
}

TEST(Server, CfgRequestsWaitForTheirTwoSequences) {
    Server s({"--parallel", "2", "--cfg", "1.0"});
    ASSERT_GT(s.port, 0);
    std::vector<int> status(3, 0);
    std::vector<std::string> got(3);
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) {
        ts.emplace_back([&, i] {
            httplib::Client ci = client(s.port);
            const json body = {{"prompt", kPrompts[i]}, {"max_tokens", 32}};
            auto r = ci.Post("/v1/completions", body.dump(), "application/json");
            if (!r) return;
            status[i] = r->status;
            if (r->status == 200) got[i] = json::parse(r->body)["choices"][0]["text"];
        });
    }
    for (auto& t : ts)
        t.join();
    httplib::Client c = client(s.port);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(status[i], 200) << kPrompts[i];
        auto r = c.Post("/v1/completions", json{{"prompt", kPrompts[i]}, {"max_tokens", 32}}.dump(),
                        "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(got[i], json::parse(r->body)["choices"][0]["text"].get<std::string>())
            << kPrompts[i];
    }
    // One sequence cannot hold a --cfg request: it fails with the reason, not an internal error.
    Server one({"--parallel", "1", "--cfg", "1.0"});
    ASSERT_GT(one.port, 0);
    httplib::Client c1 = client(one.port);
    auto r = c1.Post("/v1/completions", json{{"prompt", kPrompts[0]}, {"max_tokens", 8}}.dump(),
                     "application/json");
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("--cfg needs 2 sequences per request"), std::string::npos) << r->body;
}
