// The request bodies of llada-server's /v1/completions and /v1/chat/completions, parsed and
// checked: every field of the wrong type, out of range, unknown or not supported is a
// llada::Error naming it (the server answers 400 with the message). Separate from the server so
// the parser can be fuzzed (fuzz/request_fuzz.cpp) and tested without HTTP.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/policy.h"
#include "tokenizer/chat.h"
#include "tools/server_engine.h"

namespace llada::tools {

// A request's decoding options: the server's defaults, then the request's fields.
struct ParsedRequest {
    std::string policy;
    decode::GenerateOptions opt;
    bool stream = false;
    bool diffusion_events = false;  // opt-in llada.step events on the stream
    std::vector<std::string> stop;  // stop sequences (OpenAI's `stop`)
    // Candidates decoded together (best_of, at most --parallel) and the choices returned (n),
    // ranked by `select` when best_of > n: "confidence" (mean committed confidence) or "vote"
    // (the answer most candidates gave, decode::select_by_vote), repeated on the rest.
    int n = 1, best_of = 1;
    std::string select = "confidence";
};

// The OpenAI fields (model, prompt, messages, max_tokens, temperature, seed, stream, stop, user, n,
// best_of, top_p / frequency_penalty / presence_penalty at their "off" values) and the diffusion
// ones (policy, steps, block, threshold, lookahead, revise, diffusion_events, select). `prompt` and
// `messages` are checked by the caller (they depend on the endpoint).
ParsedRequest parse_request(const nlohmann::json& body, const std::string& default_policy,
                            const decode::GenerateOptions& defaults, const ServerLimits& limits);

// A chat request's `messages`: each an object with a string `role` and a `content` that is a
// string or an array of {"type": "text", "text": ...} parts (OpenAI's two spellings).
std::vector<tokenizer::ChatMessage> parse_messages(const nlohmann::json& body);

// Where the first stop sequence begins in `text` (npos: none).
size_t find_stop(const std::string& text, const std::vector<std::string>& stop);

}  // namespace llada::tools
