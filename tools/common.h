// Pieces shared by the command-line tools: finding the bundled model, reading prompts, chat
// wrapping, and the flags every generating tool takes.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/options.h"
#include "decode/policy.h"
#include "decode/trace.h"
#include "decode/tts.h"
#include "model/model.h"
#include "runtime/devices.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"

namespace llada::tools {

// The bundled default model's file name (models/ in the source tree, share/llada.cpp/models
// when installed).
constexpr const char* kDefaultModel = "tiny-llada-m.gguf";

// Where the default model is looked for, in order: $LLADA_MODELS_DIR, the install location next
// to the executable (../share/llada.cpp/models), the configured install prefix, the source tree.
std::vector<std::string> default_model_candidates(const char* argv0);
// The first candidate that exists; throws llada::Error listing where it looked.
std::string find_default_model(const char* argv0);

// --threshold 0 and --factor 0 are the options' "not given" values: given on the command line
// they are refused, naming the policy's default instead.
void check_commit_rule_flags(const ArgTable& args, double threshold, double factor);

// A model with its tokenizer and special ids.
struct LoadedModel {
    std::unique_ptr<model::Model> model;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    decode::TokenIds ids;
};
LoadedModel load_model(const std::string& path);

// The model's chat format (its file's template, tokenizer/chat.h) around one user message; throws
// llada::Error (prefixed "--chat: ") when the model declares none or one llada.cpp does not know.
std::vector<int32_t> chat_encode(const tokenizer::Tokenizer& tok, const std::string& user);
// A prompt's ids: chat_encode with `chat`, else the text with BOS as the file says and no
// special-token parsing.
std::vector<int32_t> problem_ids(const tokenizer::Tokenizer& tok, const std::string& prompt,
                                 bool chat);

// The decoding flags of llada-cli and llada-eval, registered on `args` and written into `opt`.
struct DecodeFlags {
    decode::GenerateOptions opt;
    std::string policy = "vanilla";
    std::string remasking = "low_confidence";
    bool early_stop = false, no_early_stop = false, full_logits = false;
    bool lut_exp = false, lut_dequant = false, kv_f16 = false;
    std::string lookahead = "auto", draft_input = "mask", pipeline_verify = "shadow";
    bool calibrate = false, full_last_layer = false;
    std::string revise_mode = "replace", revise_rows = "0";
    bool revise_serial = false;
    std::string revise_context = "fresh";
    std::string need_refresh = "suffix";
    std::string revise_tail = "cpu";
    int tts = 0;  // test-time scaling: candidates per prompt (0: off, -1: auto)
    std::string tts_arg;
    std::string select = "vote";  // vote | confidence
    // The default --help names for --policy (llada-server's differs from the CLI's).
    std::string policy_default_help = "vanilla, or ar for an autoregressive model";
    // llada-server: the flags are the defaults of requests that may name any policy, so an
    // option the default policy does not take is not refused at startup (each request's
    // fields are, by the request parser).
    bool defaults_for_any_policy = false;
    // Without --policy (and without --threshold / --factor), a diffusion model is decoded with
    // a threshold of decode::kDefaultThreshold (llada-server: dual-cache at 0.9).
    bool default_threshold = false;
    void add_to(ArgTable& args);
    // Applies the GGUF's recommended defaults (llada_cpp.gen_length, .block_length, .steps) for
    // the flags the user did not give, then checks the remaining relations.
    void finish(const ArgTable& args, const model::Model& model);
    // Where mbsd's host calibration is cached for this model and thread count:
    // $LLADA_CACHE_DIR, else $XDG_CACHE_HOME/llada.cpp, else ~/.cache/llada.cpp ("" if none).
    void set_calibration_file(const std::string& model_path, int threads);
};
// Registers decoding option `s` (decode/options.h) on `args`, its value written to `out`: the
// option's place in a GenerateOptions, or the tool's own storage of its kind (a std::string for
// Count, Choice and Text; bool, int, double, uint64_t for the others). `help` replaces the
// table's (a tool whose default differs).
void add_option(ArgTable& args, const decode::OptionSpec& s, void* out,
                const std::string& help = "");
// An "auto|N" option's value within the table's range (parse_auto_count).
int parse_count(const decode::OptionSpec& s, const std::string& value, const char* what);
// The value of an "auto|N" flag: -1 for "auto", else N in [lo, hi]; throws llada::Error
// "FLAG must be 'auto' or WHAT, got 'VALUE'" otherwise.
int parse_auto_count(const char* flag, const std::string& value, int lo, int hi, const char* what);

// The per-step record of a generation as JSON (llada-cli --json, llada-eval --out).
nlohmann::json step_json(const decode::StepInfo& s);
// Progressive revision's counters of a generation (llada-cli --json, llada-eval).
nlohmann::json revision_json(const decode::GenerateResult::Revision& r);
// Test-time scaling: the answers of the candidates (extract: the scored answer of a text) and
// the one chosen by `select` (vote | confidence).
struct TtsChoice {
    std::vector<std::string> texts, answers;
    std::vector<double> confidence;
    int vote = 0, by_confidence = 0, chosen = 0;
};
TtsChoice choose_candidate(const decode::CandidatesResult& c, const tokenizer::Tokenizer& tok,
                           const decode::TokenIds& ids, const std::string& select,
                           const std::function<std::string(const std::string&)>& extract);
nlohmann::json tts_json(const TtsChoice& t, const std::string& select);
// --tts auto resolved for a prompt length on `device` (prints the choice to stderr); N as given
// otherwise.
int resolve_tts(const DecodeFlags& dec, const model::Model& model, runtime::Device& device,
                int prompt_len);

// A generation's decision trace (--trace-out) as one JSON object, and back. `source` names the
// model and policy it came from.
nlohmann::json trace_json(const decode::GenerateResult& r, const decode::GenerateOptions& opt,
                          const std::string& source, const std::string& policy);
decode::DecisionTrace trace_from_json(const nlohmann::json& j);
// Reads a --trace-out file (one trace per line; llada-cli writes one, llada-eval one per
// problem) and picks trace `index`, or with index < 0 the one of median forward count.
// Throws llada::Error naming the file and line on malformed input.
decode::DecisionTrace read_trace(const std::string& path, int index = -1);
// Every trace of the file, or with n > 0 a fixed pseudo-random sample of n of them (when it
// holds more).
std::vector<decode::DecisionTrace> read_traces(const std::string& path, int n = 0);

// The device flags of llada-cli, llada-eval and llada-bench: which device runs the plans and,
// for npu-sim (or a cpu run projected onto a phone CPU), the profile and the memory runtime.
struct DeviceFlags {
    runtime::DeviceConfig config;
    std::string buckets;
    std::string simd;  // --simd: run the kernels of this instruction set (empty: the best)
    // The table add_to registered the flags in (it outlives make()): which flags were given.
    const ArgTable* args = nullptr;
    void add_to(ArgTable& args);
    // Throws llada::Error for an unknown device or profile and for flags the device ignores.
    std::unique_ptr<runtime::Device> make(runtime::ThreadPool& pool) const;
};
// A device report as JSON (every time field in milliseconds; "projected" fields are projected).
nlohmann::json device_report_json(const runtime::DeviceReport& r);

// Parses "ID ID ..." into token ids; throws llada::Error naming `what` on bad input.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what);
// Reads a whole file byte for byte.
std::string read_file(const std::string& path);

}  // namespace llada::tools
