// Parsing llada-server's request bodies (tools/server_request.h).
#include "tools/server_request.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "decode/options.h"
#include "decode/registry.h"
#include "tools/common.h"
#include "util/error.h"

namespace llada::tools {

using json = nlohmann::json;

std::vector<tokenizer::ChatMessage> parse_messages(const json& body) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
        throw Error("'messages' must be a non-empty array");
    std::vector<tokenizer::ChatMessage> out;
    for (const auto& m : body["messages"]) {
        const std::string at = "messages[" + std::to_string(out.size()) + "]";
        if (!m.is_object()) throw Error("'" + at + "' must be an object");
        if (!m.contains("role") || !m["role"].is_string())
            throw Error("'" + at + ".role' must be a string");
        tokenizer::ChatMessage cm{m["role"], ""};
        if (cm.role == "developer") cm.role = "system";
        const json c = m.value("content", json());
        if (c.is_string()) {
            cm.content = c;
        } else if (c.is_array()) {
            for (const auto& part : c) {
                // (Each member's type is checked before it is read: value() would throw a type
                // error on a non-string "type".)
                if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
                    !part.contains("text") || !part["text"].is_string())
                    throw Error("'" + at +
                                ".content' parts must be {\"type\": \"text\", "
                                "\"text\": string} (only text is supported)");
                cm.content += part["text"].get<std::string>();
            }
        } else {
            throw Error("'" + at + ".content' must be a string or an array of text parts");
        }
        out.push_back(std::move(cm));
    }
    return out;
}

std::string excerpt(const std::string& text, size_t max) {
    if (text.size() <= max) return text;
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
        --cut;  // not inside a UTF-8 character
    return text.substr(0, cut) + " ... (" + std::to_string(text.size()) + " bytes)";
}

std::vector<int32_t> request_prompt(const json& body, const tokenizer::Tokenizer& tok,
                                    int max_prompt) {
    if (!body.contains("prompt") || body["prompt"].is_null())
        throw Error("'prompt' is required: a string, or an array of one string or of token ids");
    json pr = body["prompt"];
    const char* what = "'prompt' must be a string, or an array of one string or of token ids";
    if (pr.is_array() && pr.size() == 1 && (pr[0].is_string() || pr[0].is_array())) pr = pr[0];
    if (pr.is_array() && !pr.empty() && (pr[0].is_string() || pr[0].is_array()))
        throw Error("'prompt' holds " + std::to_string(pr.size()) +
                    " prompts; this server takes one per request (send one request each)");
    std::vector<int32_t> ids;
    if (pr.is_string()) {
        const std::string& text = pr.get_ref<const std::string&>();
        const size_t cap = static_cast<size_t>(max_prompt) * 64;
        if (text.size() > cap) {
            throw Error("the prompt has " + std::to_string(text.size()) +
                        " bytes, more than the server's --max-prompt " +
                        std::to_string(max_prompt) + " tokens can hold");
        }
        ids = problem_ids(tok, text, false);
    } else if (pr.is_array()) {
        for (const auto& v : pr) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.n_vocab())
                throw Error("'prompt' token ids must be integers in [0, " +
                            std::to_string(tok.n_vocab()) + ")");
            ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        if (ids.empty()) throw Error("'prompt' holds no token ids");
    } else {
        throw Error(what);
    }
    if (static_cast<int>(ids.size()) > max_prompt)
        throw Error("the prompt has " + std::to_string(ids.size()) +
                    " tokens; the server takes at most " + std::to_string(max_prompt));
    return ids;
}

size_t find_stop(const std::string& text, const std::vector<std::string>& stop) {
    size_t at = std::string::npos;
    for (const auto& s : stop)
        at = std::min(at, text.find(s));
    return at;
}

ParsedRequest parse_request(const json& body_in, const std::string& default_policy,
                            const decode::GenerateOptions& defaults, const ServerLimits& limits,
                            bool chat) {
    static const std::vector<std::string> known = {"model",
                                                   "prompt",
                                                   "messages",
                                                   "max_tokens",
                                                   "temperature",
                                                   "seed",
                                                   "stream",
                                                   "steps",
                                                   "block",
                                                   "policy",
                                                   "threshold",
                                                   "lookahead",
                                                   "revise",
                                                   "n",
                                                   "top_p",
                                                   "user",
                                                   "stop",
                                                   "frequency_penalty",
                                                   "presence_penalty",
                                                   "diffusion_events",
                                                   "best_of",
                                                   "select",
                                                   "max_completion_tokens",
                                                   "stream_options",
                                                   "top_k",
                                                   "min_p",
                                                   "response_format",
                                                   "logprobs",
                                                   "top_logprobs",
                                                   "block_steps",
                                                   "editing_threshold",
                                                   "max_post_steps"};
    if (!body_in.is_object()) throw Error("the request body must be a JSON object");
    // Optional fields given as null are absent (OpenAI's clients send them so).
    json body = json::object();
    for (const auto& [k, v] : body_in.items()) {
        if (std::find(known.begin(), known.end(), k) == known.end())
            throw Error("unknown field '" + k + "'");
        if (!v.is_null()) body[k] = v;
    }
    if (body.contains("max_completion_tokens")) {
        if (body.contains("max_tokens") && body["max_tokens"] != body["max_completion_tokens"])
            throw Error("'max_tokens' and 'max_completion_tokens' differ; give one");
        body["max_tokens"] = body["max_completion_tokens"];
    }
    if (body.contains("stream_options")) {
        const json& so = body["stream_options"];
        if (!so.is_object()) throw Error("'stream_options' must be an object");
        for (const auto& [k, v] : so.items()) {
            if (k != "include_usage") throw Error("unknown field 'stream_options." + k + "'");
            if (!v.is_boolean()) throw Error("'stream_options.include_usage' must be a boolean");
        }
        if (!body.contains("stream") || body["stream"] != true)
            throw Error("'stream_options' applies to streamed requests ('stream': true)");
    }
    ParsedRequest p{default_policy, defaults, false, false, {}};
    auto num = [&](const char* k, auto& out, double lo, double hi) {
        if (!body.contains(k)) return;
        if (!body[k].is_number()) throw Error(std::string("'") + k + "' must be a number");
        const double v = body[k].get<double>();
        if (!(v >= lo && v <= hi))
            throw Error(std::string("'") + k + "' must be in [" + number_str(lo) + ", " +
                        number_str(hi) + "]");
        using T = std::remove_reference_t<decltype(out)>;
        // Integer fields take integers: 1.5 tokens is an error, not 1.
        if (std::is_integral_v<T> && v != std::floor(v))
            throw Error(std::string("'") + k + "' must be an integer");
        out = static_cast<T>(v);
    };
    // The decoding options' fields, by decode/options.h's table (the command-line flags' ranges;
    // the lengths capped by the server's --max-gen): a number in range, an integer where the
    // option is one, 0 refused where it means "not given" (as --threshold 0 is).
    auto option = [&](const char* k, double hi = INFINITY) -> std::optional<double> {
        if (!body.contains(k)) return std::nullopt;
        const decode::OptionSpec& s = *decode::find_field(k);
        const std::string name = std::string("'") + k + "'";
        if (s.kind == decode::OptionKind::Switch) {
            if (!body[k].is_boolean()) throw Error(name + " must be a boolean");
            return body[k].get<bool>() ? 1.0 : 0.0;
        }
        if (!body[k].is_number()) throw Error(name + " must be a number");
        const double v = body[k].get<double>();
        decode::check_option(s, v, name, hi);
        return v;
    };
    auto set = [&](const char* k, double hi = INFINITY) {
        if (const auto v = option(k, hi))
            decode::set_option(p.opt, *decode::find_field(k), *v, std::string("'") + k + "'", hi);
    };
    set("max_tokens", limits.max_gen);
    const int max_tokens = p.opt.gen;
    set("seed");
    set("temperature");
    set("threshold");
    set("block", limits.max_gen);
    set("lookahead", limits.max_gen);
    const int steps = static_cast<int>(option("steps").value_or(0));
    if (body.contains("policy")) {
        if (!body["policy"].is_string()) throw Error("'policy' must be a string");
        p.policy = body["policy"];
        if (decode::find_policy(p.policy) == nullptr)
            throw Error("'policy' '" + p.policy + "' is not one of " + decode::policy_list());
    }
    const decode::PolicyInfo& info = decode::policy_info(p.policy);
    // A field of a group the policy does not take is refused with the registry's words (the
    // command-line tools say the same of their flags, from the same table); a diffusion
    // policy's commit rule, steps and revision are refused below or by the step engine's
    // checks, which say why.
    for (const auto& [k, v] : body.items()) {
        const decode::OptionSpec* s = decode::find_field(k);
        if (s != nullptr && !s->taken_by(info) && !decode::engine_refuses(info, s->takes()))
            throw Error(decode::not_taken("'" + k + "'", s->takes(), info, "policy "));
    }
    set("revise");
    set("block_steps");
    set("editing_threshold");
    set("max_post_steps");
    if (body.contains("stream")) {
        if (!body["stream"].is_boolean()) throw Error("'stream' must be a boolean");
        p.stream = body["stream"];
    }
    if (body.contains("stream_options"))
        p.include_usage = body["stream_options"].value("include_usage", false);
    if (body.contains("diffusion_events")) {
        if (!body["diffusion_events"].is_boolean())
            throw Error("'diffusion_events' must be a boolean");
        p.diffusion_events = body["diffusion_events"];
    }
    if (body.contains("stop") && !body["stop"].is_null()) {
        const json& s = body["stop"];
        const char* what = "'stop' must be a string or an array of at most 4 non-empty strings";
        if (s.is_string()) {
            p.stop.push_back(s);
        } else if (s.is_array() && s.size() <= 4) {
            for (const auto& e : s) {
                if (!e.is_string()) throw Error(what);
                p.stop.push_back(e);
            }
        } else {
            throw Error(what);
        }
        for (const auto& e : p.stop) {
            if (e.empty()) throw Error(what);
        }
    }
    // Accepted at the values that mean "off"; anything else would be silently ignored.
    double top_p = 1.0, frequency_penalty = 0.0, presence_penalty = 0.0;
    num("top_p", top_p, 0.0, 1.0);
    num("frequency_penalty", frequency_penalty, -2.0, 2.0);
    num("presence_penalty", presence_penalty, -2.0, 2.0);
    if (top_p != 1.0) throw Error("'top_p' other than 1 is not supported");
    if (frequency_penalty != 0.0 || presence_penalty != 0.0)
        throw Error("'frequency_penalty' and 'presence_penalty' other than 0 are not supported");
    if (body.contains("user") && !body["user"].is_string()) throw Error("'user' must be a string");
    // The sampling filter (decode::SampleFilter; Dream's own top_k under policy dream). 0 is
    // "off" for both, as in llama-server; a filter at temperature 0 would be ignored.
    set("top_k");
    set("min_p");
    if (p.opt.filter.on() && p.opt.temperature == 0.0) {
        throw Error(
            "'top_k' and 'min_p' filter a sampled choice: they need a 'temperature' above 0 (at "
            "0 the most likely token is taken)");
    }
    if (info.takes_option(decode::Takes::DreamSampler)) {
        if (p.opt.filter.min_p > 0.0)
            throw Error(
                "'min_p' does not apply to policy 'dream' (Dream's sampler filters with "
                "top_k)");
        p.opt.dream.top_k = p.opt.filter.top_k;
        p.opt.filter = {};
    }
    // logprobs, as each endpoint spells them: /v1/completions `logprobs` N (the top tokens per
    // position, 0 for the chosen token's alone); chat `logprobs` true with `top_logprobs` N.
    if (chat) {
        bool on = false;
        if (body.contains("logprobs")) {
            if (!body["logprobs"].is_boolean())
                throw Error(
                    "'logprobs' must be a boolean in /v1/chat/completions "
                    "('top_logprobs' gives the number of top tokens)");
            on = body["logprobs"];
        }
        int top = 0;
        num("top_logprobs", top, 0, 20);
        if (body.contains("top_logprobs") && !on)
            throw Error("'top_logprobs' needs 'logprobs': true");
        p.logprobs = on ? top : -1;
    } else {
        if (body.contains("top_logprobs"))
            throw Error(
                "'top_logprobs' is a chat field; /v1/completions takes 'logprobs' N "
                "(the number of top tokens)");
        if (body.contains("logprobs") && !body["logprobs"].is_number_integer())
            throw Error(
                "'logprobs' must be an integer in /v1/completions (the number of top "
                "tokens per position, 0 for the chosen token's alone)");
        num("logprobs", p.logprobs, 0, 20);
    }
    if (p.logprobs >= 0) {
        if (info.family == decode::PolicyFamily::Dream)
            throw Error("'logprobs' are not recorded by policy 'dream' (Dream's own sampler)");
        if (p.opt.revise.on)
            throw Error(
                "'logprobs' are not recorded with 'revise' (the CPU path replaces "
                "tokens from rows whose distributions it does not keep)");
        p.opt.logprobs = p.logprobs;
    }
    if (body.contains("response_format")) {
        const json& rf = body["response_format"];
        if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
            throw Error("'response_format' must be an object with a string 'type'");
        // JSON mode is not offered: it cannot be honoured exactly. A diffusion policy fixes
        // positions in any order, and no grammar over the canvas constrains them.
        if (rf["type"] != "text") {
            throw Error("'response_format' type '" + rf["type"].get<std::string>() +
                        "' is not supported (only \"text\"): this server has no constrained "
                        "decoding, so valid JSON could not be guaranteed");
        }
        for (const auto& [k, v] : rf.items()) {
            if (k != "type") throw Error("unknown field 'response_format." + k + "'");
        }
    }
    // n choices of best_of candidates, decoded together (test-time scaling, decode/tts.h):
    // candidate k samples with seed + k; the n returned are the best by 'select'.
    num("n", p.n, 1, limits.parallel);
    p.best_of = p.n;
    num("best_of", p.best_of, 1, limits.parallel);
    if (p.best_of < p.n) {
        throw Error("'best_of' (" + std::to_string(p.best_of) + ") must be at least 'n' (" +
                    std::to_string(p.n) + ")");
    }
    if (body.contains("select")) {
        if (!body["select"].is_string() ||
            (body["select"] != "confidence" && body["select"] != "vote"))
            throw Error("'select' must be \"confidence\" or \"vote\"");
        if (p.best_of == p.n) throw Error("'select' ranks candidates when 'best_of' exceeds 'n'");
        p.select = body["select"];
    }
    if (p.stream && p.best_of > p.n) {
        throw Error(
            "'best_of' greater than 'n' cannot be streamed (the choices are known only "
            "when every candidate is done)");
    }
    if (!info.diffusion()) {
        // (LLaDA 2.x's blocks are the session's attention blocks: its canvas runs to a whole
        // number of them, whatever max_tokens is.)
        p.opt.gen = max_tokens;
        p.opt.steps = info.takes_option(decode::Takes::Steps) && steps > 0 ? steps : max_tokens;
        if (!info.takes_option(decode::Takes::CommitRule)) p.opt.threshold = 0.0;
        p.opt.factor = 0.0;
        p.opt.revise.on = false;
        return p;
    }
    // The generated length is the requested tokens rounded up to a whole number of blocks.
    if (p.opt.block > max_tokens) p.opt.block = max_tokens;
    p.opt.gen = (max_tokens + p.opt.block - 1) / p.opt.block * p.opt.block;
    if (p.opt.gen > limits.max_gen)
        throw Error("max_tokens rounded up to whole blocks exceeds the server's --max-gen");
    p.opt.steps = steps > 0 ? steps : p.opt.gen;
    if (!info.takes_option(decode::Takes::CommitRule)) {
        // LLaDA's reference schedule has no commit threshold: the server's default threshold
        // is for the parallel policies; a threshold the request asks for is an error.
        if (body.contains("threshold") && p.opt.threshold != 0.0) {
            throw Error(
                "'threshold' applies to the parallel policies (threshold, prefix-cache, "
                "dual-cache, need, mbsd), not 'vanilla' (LLaDA's reference schedule)");
        }
        p.opt.threshold = 0.0;
        p.opt.factor = 0.0;
        if (p.opt.revise.on) {
            throw Error(
                "'revise' needs a policy that commits early (threshold, prefix-cache, "
                "dual-cache, need, mbsd), not 'vanilla'");
        }
    }
    // A parallel commit rule takes as many steps per block as it needs: a 'steps' would be
    // ignored (the command-line tools refuse --steps there too).
    if (body.contains("steps") &&
        (p.opt.threshold > 0.0 || p.opt.factor > 0.0 || info.parallel_only)) {
        throw Error(
            "'steps' applies to the step schedule; with a commit threshold (the "
            "server's default " +
            number_str(p.opt.threshold) + " for '" + p.policy +
            "', or 'threshold') a block takes as many steps as it needs: leave 'steps' "
            "out, or use policy 'vanilla'");
    }
    // The decoder's own checks would name command-line flags; these name the request's fields.
    const int n_blocks = p.opt.gen / p.opt.block;
    if (p.opt.steps % n_blocks != 0) {
        throw Error("'steps' " + std::to_string(p.opt.steps) + " is not a multiple of the " +
                    std::to_string(n_blocks) + " blocks ('max_tokens' " +
                    std::to_string(max_tokens) + " rounded up to whole blocks of 'block' " +
                    std::to_string(p.opt.block) + ")");
    }
    return p;
}

}  // namespace llada::tools
