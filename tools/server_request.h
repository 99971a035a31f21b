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
    // stream_options.include_usage: a last chunk (no choices) with the usage before [DONE].
    bool include_usage = false;
    // logprobs: -1 off, else the answer tokens' log-probabilities with this many top tokens
    // each (/v1/completions: `logprobs` N; chat: `logprobs` true and `top_logprobs` N).
    int logprobs = -1;
};

// The OpenAI fields (model, prompt, messages, max_tokens or max_completion_tokens, temperature,
// seed, stream, stream_options, stop, user, n, best_of, top_p / frequency_penalty /
// presence_penalty at their "off" values) and the diffusion ones (policy, steps, block,
// threshold, lookahead, revise, diffusion_events, select). A field given as null is absent, as
// OpenAI's clients send optional fields. A field the chosen policy would ignore is an error, in
// the words the command-line tools use for the flag. `prompt` and `messages` are checked by the
// caller (they depend on the endpoint: request_prompt below).
ParsedRequest parse_request(const nlohmann::json& body, const std::string& default_policy,
                            const decode::GenerateOptions& defaults, const ServerLimits& limits,
                            bool chat = false);

// A chat request's `messages`: each an object with a string `role` and a `content` that is a
// string or an array of {"type": "text", "text": ...} parts (OpenAI's two spellings). Role
// "developer" (OpenAI's newer name for the system role) is read as "system".
std::vector<tokenizer::ChatMessage> parse_messages(const nlohmann::json& body);

// A completion request's `prompt` as token ids: a string (tokenized as the tools do), an array
// of one string, or an array of token ids (each below n_vocab; an array of one such array too).
// Several prompts in one request are refused (send one request each). A prompt longer than
// max_prompt tokens, or a string of more than max_prompt * 64 bytes (refused before it is
// tokenized), is an error naming the limit.
std::vector<int32_t> request_prompt(const nlohmann::json& body, const tokenizer::Tokenizer& tok,
                                    int max_prompt);

// An error message with the client's own text cut to a short excerpt: at most `max` bytes of
// `text`, then " ... (N bytes)".
std::string excerpt(const std::string& text, size_t max = 120);

// Where the first stop sequence begins in `text` (npos: none).
size_t find_stop(const std::string& text, const std::vector<std::string>& stop);

}  // namespace llada::tools
