// The command-line tools as a user runs them: llada-cli's JSON output against the library,
// the prompt paths, the default-model search, and the error messages.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "decode/policy.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "runtime/device.h"
#include "tests/test_util.h"

using namespace llada;
namespace fs = std::filesystem;

namespace {

using Result = llada::test::CommandResult;

Result run(const std::string& cmd) {
    return llada::test::run_command(cmd, "tools_test");
}

std::string bin(const char* name) {
    return (fs::path(LLADA_BIN_DIR) / name).string();
}
std::string fixture_model() {
    return (fs::path(LLADA_TEST_DATA) / "decode" / "llada-mha.gguf").string();
}

}  // namespace

TEST(LladaCli, JsonMatchesTheLibraryForGivenPromptTokens) {
    Result r = run(bin("llada-cli") + " -m " + fixture_model() +
                   " --prompt-tokens '256 72 105' --gen 16 --block 8 --steps 8 --json -t 2");
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    for (const char* key : {"text", "tokens", "steps", "nfe", "wall_s", "per_step"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["steps"], 8);
    EXPECT_EQ(j["nfe"], 8);
    EXPECT_EQ(j["per_step"].size(), 8u);
    EXPECT_EQ(j["prompt_tokens"], 3);  // used exactly as given: no BOS added

    // The same generation through the library.
    auto m = model::Model::load(fixture_model());
    runtime::ThreadPool pool(1);
    auto dev = runtime::make_cpu_device(pool);
    decode::GenerateOptions opt;
    opt.gen = 16;
    opt.block = 8;
    opt.steps = 8;
    auto res = decode::make_policy("vanilla", *m, *dev, opt, {258, 257, -1})
                   ->generate(std::vector<int32_t>{256, 72, 105});
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), res.generated());
}

TEST(LladaCli, TextPromptGetsBosAndTextOutputStopsAtEos) {
    Result r =
        run(bin("llada-cli") + " -m " + fixture_model() + " -p Hi --gen 16 --block 16 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_tokens"], 3);  // BOS + 'H' + 'i' (byte-level vocabulary)
    auto toks = j["tokens"].get<std::vector<int32_t>>();
    size_t eos = std::find(toks.begin(), toks.end(), 257) - toks.begin();
    EXPECT_EQ(j["answer_tokens"].get<size_t>(), eos);
}

TEST(LladaCli, NonTerminalOutputIsPlainTextAndASummary) {
    Result r = run(bin("llada-cli") + " -m " + fixture_model() + " -p Hi --gen 8 --block 8");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("\x1b["), std::string::npos);  // no live view when piped
    EXPECT_NE(r.err.find("8 steps, 8 forward passes"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos);
}

TEST(LladaCli, ClearErrors) {
    struct Case {
        std::string args, expect;
    } cases[] = {
        {"-m " + fixture_model(), "no prompt"},
        {"-m " + fixture_model() + " -p x --bogus", "unknown option '--bogus'"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 6", "not a multiple of --block 6"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --steps 3",
         "--steps 3 is not a multiple of the 2 blocks"},
        {"-m " + fixture_model() + " -p x --gen 200", "exceeds the model's context length 64"},
        {"-m " + fixture_model() + " -p x --remasking lowest", "--remasking must be"},
        {"-m " + fixture_model() + " -p x --chat", "no chat format"},
        {"-m " + fixture_model() + " -p x --gen abc", "--gen expects an integer, got 'abc'"},
        {"-m " + fixture_model() + " --prompt-tokens '1 999' --gen 16", "outside the vocabulary"},
        {"-m " + fixture_model() + " -p x --policy nope", "unknown policy 'nope'"},
        {"-m /nonexistent.gguf -p x", "cannot open '/nonexistent.gguf'"},
        {"-m " + fixture_model() + " -p x -f y", "only one of"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy dual-cache --lookahead 4",
         "--lookahead applies to --policy mbsd, not dual-cache"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy need --pipeline-start 0.5",
         "--pipeline-start applies to --policy pipeline, not need"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy pipeline --steps 8",
         "--steps applies to the step schedule"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --lookahead many",
         "--lookahead must be 'auto' or a row count"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --draft-input both",
         "--draft-input must be mask or token"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy pipeline --pipeline-verify x",
         "--pipeline-verify must be mask, shadow or window, got 'x'"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --revise-margin 0.3",
         "--revise-margin is a setting of --revise; give --revise too"},
        {"-m " + fixture_model() +
             " -p x --gen 16 --block 8 --policy mbsd --revise --revise-mode x",
         "--revise-mode must be replace or remask"},
        {"-m " + fixture_model() +
             " -p x --gen 16 --block 8 --policy mbsd --revise --revise-tail gpu",
         "--revise-tail must be cpu or dense, got 'gpu'"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --revise-tail dense",
         "--revise-tail is a setting of --revise; give --revise too"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --revise",
         "vanilla is LLaDA's reference schedule"},
        {"-m " + fixture_model() +
             " -p x --gen 16 --block 8 --policy mbsd --threshold 0.9 --self-check-accept 0.5",
         "--self-check-accept is a setting of --self-check; give --self-check too"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy pipeline --self-check",
         "--self-check applies to --policy need and mbsd"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --revise --cfg 1",
         "--revise cannot be combined with --cfg"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --select vote",
         "--select applies to --tts N"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --tts many",
         "--tts must be 'auto' or a count in [1, 4096]"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --tts 2 --select best",
         "--select must be vote or confidence"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy dual-cache --tts auto",
         "--tts auto sizes N from the device's latency table"},
        {"-m " + fixture_model() +
             " -p x --gen 16 --block 8 --policy mbsd --lookahead 4 --calibrate",
         "needs none"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy mbsd --remasking random",
         "cannot be combined with --remasking random"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy need --refresh 2",
         "--refresh applies to the cache policies"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --policy threshold --threshold 0",
         "--threshold 0 is not a threshold"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --factor 0",
         "--factor 0 is not a factor"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --steps 8 --policy threshold",
         "--steps applies to the step schedule"},
        {"-m " + fixture_model() + " -p x --gen 16 --block 8 --steps 8 --threshold 0.9",
         "--steps applies to the step schedule"},
    };
    for (const auto& c : cases) {
        Result r = run(bin("llada-cli") + " " + c.args);
        EXPECT_EQ(r.status, 1) << c.args;
        EXPECT_NE(r.err.find("error: "), std::string::npos) << c.args << ": " << r.err;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
    }
}

// The fixture model rewritten with the keys `keys` replaced by what `set` writes.
// `patch`, when given, may change each tensor's bytes.
using TensorPatch = std::function<void(const format::GgufTensor&, std::vector<uint8_t>&)>;
fs::path fixture_with(const std::string& name, const std::vector<std::string>& keys,
                      const std::function<void(format::GgufWriter&, const format::GgufFile&)>& set,
                      const TensorPatch& patch = nullptr, const std::string& source = "") {
    const auto path = fs::temp_directory_path() / (name + std::to_string(getpid()) + ".gguf");
    auto f = format::GgufFile::open(source.empty() ? fixture_model() : source);
    format::GgufWriter w;
    for (const auto& kv : f->kvs()) {
        if (std::find(keys.begin(), keys.end(), kv.key) == keys.end()) w.copy_kv(kv);
    }
    set(w, *f);
    for (const auto& t : f->tensors()) {
        std::vector<uint8_t> data(t.data, t.data + t.n_bytes);
        if (patch) patch(t, data);
        w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), std::move(data));
    }
    w.write(path.string());
    return path;
}

// The fixture model with tensor `name`'s ggml type id overwritten by `type` in the file's
// tensor table (a type the writer could not produce: one llada.cpp does not read, or a block
// format whose block does not divide the rows).
fs::path fixture_with_type_id(const std::string& file, const std::string& name, uint32_t type) {
    const fs::path src =
        fixture_with(file, {}, [](format::GgufWriter&, const format::GgufFile&) {});
    std::ifstream in(src, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    // Tensor info: u64 name length, the name, u32 n_dims, n_dims u64 extents, u32 type.
    std::string key(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    key += name;
    const size_t at = bytes.find(key);
    EXPECT_NE(at, std::string::npos) << name;
    uint32_t n_dims;
    std::memcpy(&n_dims, bytes.data() + at + key.size(), 4);
    std::memcpy(bytes.data() + at + key.size() + 4 + 8 * n_dims, &type, 4);
    std::ofstream(src, std::ios::binary) << bytes;
    return src;
}

// A tensor type llada.cpp does not read (IQ2_XS, TQ1_0) is refused naming the tensor, the type
// and every supported type; a k-quant tensor whose rows are not a multiple of 256 is refused
// naming the tensor. Each message is printed once and ends the output with a newline.
TEST(LladaCli, UnsupportedTensorTypesAreNamedOnce) {
    struct Case {
        uint32_t type;
        std::string expect;
    } cases[] = {
        {17,
         "tensor 'blk.0.attn_q.weight': tensor type IQ2_XS (ggml type 17) is not supported; "
         "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, "
         "Q5_K, Q6_K, IQ4_XS, TQ4, TQ8, TF16"},
        {34, "tensor type TQ1_0 (ggml type 34) is not supported"},
        {12,
         "tensor 'blk.0.attn_q.weight': first dimension 32 is not a multiple of Q4_K's "
         "block size 256"},
    };
    for (const Case& c : cases) {
        const fs::path path = fixture_with_type_id("bad-type-", "blk.0.attn_q.weight", c.type);
        for (const std::string tool :
             {"llada-cli -p x", "llada-forward --tokens '1 2' --out /dev/null"}) {
            Result r = run(bin(tool.substr(0, tool.find(' ')).c_str()) + " -m " + path.string() +
                           tool.substr(tool.find(' ')));
            EXPECT_EQ(r.status, 1) << tool;
            const size_t first = r.err.find(c.expect);
            EXPECT_NE(first, std::string::npos) << tool << ": " << r.err;
            EXPECT_EQ(r.err.find(c.expect, first + 1), std::string::npos) << tool << ": " << r.err;
            EXPECT_EQ(r.err.find("error: "), 0u) << r.err;
            EXPECT_EQ(r.err.rfind("error: "), 0u) << r.err;
            EXPECT_EQ(r.err.back(), '\n') << r.err;
        }
        fs::remove(path);
    }
}

// The generation the file recommends (llada_cpp.gen_length / block_length) out of range: an
// error naming the key, never a silent fallback to 128 / 32; --gen / --block override it.
TEST(LladaCli, OutOfRangeGenerationMetadataIsAnError) {
    const auto path = fixture_with("bad-gen-", {"llada_cpp.gen_length"},
                                   [](format::GgufWriter& w, const format::GgufFile&) {
                                       w.set_u32("llada_cpp.gen_length", 0);
                                   });
    Result r = run(bin("llada-cli") + " -m " + path.string() + " -p x --block 8");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("llada_cpp.gen_length is 0, outside 1 .. 1048575; give --gen"),
              std::string::npos)
        << r.err;
    r = run(bin("llada-cli") + " -m " + path.string() + " -p x --gen 16 --block 8 --steps 8");
    EXPECT_EQ(r.status, 0) << r.err;
    fs::remove(path);
}

// A tokenizer with more tokens than the model has embedding rows is refused at load.
TEST(LladaCli, TokenizerLargerThanTheVocabularyIsAnError) {
    const auto path =
        fixture_with("big-tok-", {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"},
                     [](format::GgufWriter& w, const format::GgufFile& f) {
                         std::vector<std::string> tokens;
                         for (auto t : f.get_string_array("tokenizer.ggml.tokens"))
                             tokens.emplace_back(t);
                         tokens.push_back("<extra>");
                         w.set_array_string("tokenizer.ggml.tokens", tokens);
                         if (f.find("tokenizer.ggml.token_type")) {
                             std::vector<int32_t> types;
                             for (auto v : f.get_int_array("tokenizer.ggml.token_type"))
                                 types.push_back(static_cast<int32_t>(v));
                             types.push_back(1);
                             w.set_array_i32("tokenizer.ggml.token_type", types);
                         }
                     });
    Result r = run(bin("llada-cli") + " -m " + path.string() + " -p x --gen 16 --block 8");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("tokens but the model's vocabulary has"), std::string::npos) << r.err;
    fs::remove(path);
}

// A NaN in the weights makes every logit NaN; the argmax over NaN would silently be id 0.
// Every policy's loop checks its logits: the diffusion policies, Dream's sampler and the AR
// baseline (on a causal model), alone and as test-time-scaling candidates.
TEST(LladaCli, NanWeightsAreAnErrorNotTokenZero) {
    const TensorPatch nan_norm = [](const format::GgufTensor& t, std::vector<uint8_t>& data) {
        if (std::string(t.name) != "output_norm.weight") return;
        ASSERT_EQ(t.type, format::TensorType::F32);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (size_t i = 0; i + 4 <= data.size(); i += 4)
            std::memcpy(&data[i], &nan, 4);
    };
    const auto none = [](format::GgufWriter&, const format::GgufFile&) {};
    const auto path = fixture_with("nan-", {}, none, nan_norm);
    const auto ar =
        fixture_with("nan-ar-", {}, none, nan_norm,
                     (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-ar-s.gguf").string());
    const std::pair<fs::path, const char*> runs[] = {
        {path, "vanilla --steps 8 --block 8"},
        {path, "dual-cache --threshold 0.9 --block 8"},
        {path, "dream --steps 4"},
        {ar, "ar"},
        {ar, "ar --tts 2 --temperature 1"},
    };
    for (const auto& [model, policy] : runs) {
        Result r =
            run(bin("llada-cli") + " -m " + model.string() + " -p x --gen 16 --policy " + policy);
        EXPECT_EQ(r.status, 1) << policy;
        EXPECT_NE(r.err.find("non-finite logit at position"), std::string::npos)
            << policy << ": " << r.err;
    }
    fs::remove(path);
    fs::remove(ar);
}

TEST(LladaCli, AnOptionGivenTwiceIsAnError) {
    Result r = run(bin("llada-cli") + " -m " + fixture_model() + " -p x --gen 16 --gen 32");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("option --gen is given twice"), std::string::npos) << r.err;
    r = run(bin("llada-cli") + " -m " + fixture_model() + " -p x -t 1 --threads=2");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("option --threads is given twice"), std::string::npos) << r.err;
}

// The autoregressive baseline takes no blocks, steps, commit rule or revision: each is refused
// (it used to be ignored) in the registry's words, which the server's request parser shares.
TEST(LladaCli, ArRefusesTheDiffusionOptions) {
    const std::string ar = (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-ar-s.gguf").string();
    const std::pair<const char*, const char*> cases[] = {
        {"--block 8",
         "--block applies to the policies vanilla, prefix-cache, dual-cache, "
         "threshold, need, mbsd, pipeline, llada2, not ar"},
        {"--steps 8",
         "--steps applies to the policies vanilla, prefix-cache, dual-cache, need, "
         "mbsd, dream, not ar"},
        {"--threshold 0.9",
         "--threshold applies to the policies prefix-cache, dual-cache, "
         "threshold, need, mbsd, pipeline, llada2, not ar"},
        {"--revise",
         "--revise applies to the policies prefix-cache, dual-cache, threshold, need, "
         "mbsd, not ar"},
        {"--lookahead 4", "--lookahead applies to --policy mbsd, not ar"},
    };
    for (const auto& [flags, want] : cases) {
        Result r = run(bin("llada-cli") + " -m " + ar + " -p x --gen 8 " + flags);
        EXPECT_EQ(r.status, 1) << flags;
        EXPECT_NE(r.err.find(want), std::string::npos) << flags << ": " << r.err;
    }
    // The same model and prompt without them decodes.
    EXPECT_EQ(run(bin("llada-cli") + " -m " + ar + " -p x --gen 8").status, 0);
}

// llada-server's default policy (dual-cache at threshold 0.9) is decided where the CLI's
// defaults are, before the flags are checked: --steps beside it is refused at startup, as a
// request's 'steps' is, instead of being ignored. (timeout: a server that took the flag would
// listen until killed, status 124.)
TEST(LladaServer, StepsBesideTheDefaultThresholdIsRefusedAtStartup) {
    Result r = run("timeout 20 " + bin("llada-server") + " -m " + fixture_model() +
                   " --steps 8 --port 0 --max-gen 32");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("--steps applies to the step schedule"), std::string::npos) << r.err;
}

// Dream's sampler from the command line: its flags only with it, no blocks.
TEST(LladaCli, DreamPolicyRunsAndItsFlagsBelongToIt) {
    Result r = run(bin("llada-cli") + " -m " + fixture_model() +
                   " --prompt-tokens '256 72 105' --policy dream --dream-alg maskgit_plus --gen 8"
                   " --steps 4 --temperature 0.5 --top-k 20 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["per_step"].size(), 4u) << r.out;
    r = run(bin("llada-cli") + " -m " + fixture_model() + " -p x --gen 8 --dream-alg entropy");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("--dream-alg applies to --policy dream, not vanilla"), std::string::npos)
        << r.err;
    r = run(bin("llada-cli") + " -m " + fixture_model() + " -p x --gen 8 --policy dream --block 4");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("--block applies to the policies vanilla, prefix-cache, dual-cache, "
                         "threshold, need, mbsd, pipeline, llada2, not dream"),
              std::string::npos)
        << r.err;
}

TEST(LladaCli, HelpListsTheFlags) {
    Result r = run(bin("llada-cli") + " --help");
    EXPECT_EQ(r.status, 0);
    for (const char* f : {"--model", "--prompt", "--file", "--prompt-tokens", "--gen", "--steps",
                          "--block", "--temperature", "--cfg", "--remasking", "--seed", "--threads",
                          "--policy", "--chat", "--json", "--no-display"}) {
        EXPECT_NE(r.out.find(f), std::string::npos) << f;
    }
}

// The default model is found in an installed layout (bin/ next to share/llada.cpp/models/),
// wherever that tree is, and through $LLADA_MODELS_DIR.
TEST(LladaCli, DefaultModelFromAnInstalledLayout) {
    const fs::path root = fs::temp_directory_path() / "llada_install_test";
    fs::remove_all(root);
    fs::create_directories(root / "bin");
    fs::create_directories(root / "share" / "llada.cpp" / "models");
    fs::copy_file(bin("llada-cli"), root / "bin" / "llada-cli");
    fs::copy_file(fixture_model(), root / "share" / "llada.cpp" / "models" / "tiny-llada-m.gguf");
    Result r = run((root / "bin" / "llada-cli").string() + " -p Hi --gen 8 --block 8 --json");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("tiny-llada-m.gguf"), std::string::npos);
    // Through the environment variable, with the installed copy gone.
    fs::path env_dir = root / "elsewhere";
    fs::create_directories(env_dir);
    fs::rename(root / "share" / "llada.cpp" / "models" / "tiny-llada-m.gguf",
               env_dir / "tiny-llada-m.gguf");
    r = run("LLADA_MODELS_DIR=" + env_dir.string() + " " + (root / "bin" / "llada-cli").string() +
            " -p Hi --gen 8 --block 8 --json");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(env_dir.string()), std::string::npos);
    fs::remove_all(root);
}

TEST(LladaCli, DefaultModelFromTheSourceTree) {
    const fs::path bundled = fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-m.gguf";
    if (!fs::exists(bundled)) GTEST_SKIP() << "models/tiny-llada-m.gguf is not in this tree yet";
    Result r = run(bin("llada-cli") + " -p '12+35=' --json");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(bundled.string()), std::string::npos);
}

TEST(LladaForward, WritesTheFixtureLayout) {
    const fs::path dir = fs::path(LLADA_TEST_DATA) / "decode";
    const fs::path out = fs::temp_directory_path() / "llada_forward_test.f32";
    Result r =
        run(bin("llada-forward") + " -m " + (dir / "llada-mha.gguf").string() + " --tokens-file " +
            (dir / "llada-mha.tokens.txt").string() + " --out " + out.string());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(fs::file_size(out), fs::file_size(dir / "llada-mha.logits.f32"));
    r = run(bin("llada-forward") + " -m " + (dir / "llada-mha.gguf").string() +
            " --tokens '1 2 x' --out " + out.string());
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("'x' is not a token id"), std::string::npos) << r.err;
    fs::remove(out);
}

// Every tool's --json is one JSON document on stdout and nothing else (human tables and progress
// go to stderr), so `tool --json | jq` and json.loads(stdout) work in every mode.
TEST(Tools, EveryJsonModePrintsOneDocumentAlone) {
    const std::string m = " -m " + fixture_model() + " -t 1 ";
    const std::string tasks =
        (fs::path(LLADA_SOURCE_DIR) / "models" / "tasks" / "smoke-50.jsonl").string();
    const std::string shipped =
        " -m " + (fs::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-s.gguf").string() + " -t 1 ";
    const std::pair<const char*, std::string> modes[] = {
        {"cli", bin("llada-cli") + m + "-p Hi --gen 8 --block 8 --json"},
        {"cli tts",
         bin("llada-cli") + m + "-p Hi --gen 8 --block 8 --tts 2 --temperature 1 --json"},
        {"eval", bin("llada-eval") + shipped + "--tasks " + tasks + " --limit 2 --json"},
        {"bench rows", bin("llada-bench") + m + "--rows 1,8 --reps 1 --no-peaks --json"},
        {"bench sampling",
         bin("llada-bench") + m + "--sampling --window 16 --need 4 --reps 1 --json"},
        {"bench e2e", bin("llada-bench") + m +
                          "--e2e --policies vanilla,dual-cache --prompt-len 4 --gen 16 --block 8 "
                          "--reps 1 --json"},
        {"bench ablation", bin("llada-bench") + m +
                               "--ablation --prompt-len 4 --gen 16 --block 8 --no-sensitivity "
                               "--json"},
    };
    for (const auto& [name, cmd] : modes) {
        const Result r = run(cmd);
        ASSERT_EQ(r.status, 0) << name << ": " << r.err;
        // parse() refuses anything before or after the one document.
        nlohmann::json j;
        EXPECT_NO_THROW(j = nlohmann::json::parse(r.out)) << name << ": " << r.out;
        EXPECT_TRUE(j.is_object()) << name;
    }
}

// No tool destroys its input (format/output_file.h): llada-quantize refuses to write over the
// file it reads, by any path, before writing anything; a re-quantisation into another file
// leaves the input's bytes as they were.
TEST(OutputFiles, QuantizeRefusesItsOwnInputByEveryPath) {
    const fs::path d = fs::temp_directory_path() / ("quantize-own-" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    const fs::path m = d / "m.gguf";
    fs::copy_file(fixture_model(), m);
    fs::create_symlink(m, d / "link.gguf");
    const auto before = fs::file_size(m);
    std::ifstream f0(m, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f0)), std::istreambuf_iterator<char>());
    for (const std::string& out :
         {m.string(), (d / "link.gguf").string(), (d / "." / "m.gguf").string()}) {
        Result r = run(bin("llada-quantize") + " --in " + m.string() + " --out " + out +
                       " --type Q8_0 -t 1 --no-progress");
        EXPECT_EQ(r.status, 1) << out;
        EXPECT_NE(r.err.find("is the input"), std::string::npos) << r.err;
        ASSERT_EQ(fs::file_size(m), before) << out;
    }
    Result ok = run(bin("llada-quantize") + " --in " + (d / "link.gguf").string() + " --out " +
                    (d / "q8.gguf").string() + " --type Q8_0 -t 1 --no-progress");
    EXPECT_EQ(ok.status, 0) << ok.err;
    std::ifstream f1(m, std::ios::binary);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>()),
              bytes);
    fs::remove_all(d);
}

// A write killed half-way (SIGKILL: no handler runs) leaves the old target whole: the bytes
// went to a temporary file beside it, renamed only once complete. The target here is a model
// that the write would replace; the kill lands while the temporary file is being written.
TEST(OutputFiles, AKilledWriteLeavesTheOldFile) {
    const fs::path d = fs::temp_directory_path() / ("killed-write-" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    const fs::path target = d / "model.gguf";
    fs::copy_file(fixture_model(), target);
    const auto before = fs::file_size(target);
    const pid_t pid = fork();
    if (pid == 0) {
        const std::string q = bin("llada-quantize");
        execl(q.c_str(), q.c_str(), "--synthetic", "d=512,layers=4,heads=8,ffn=1408,vocab=32000",
              "--type", "F32", "--out", target.c_str(), "-t", "1", "--no-progress",
              static_cast<char*>(nullptr));
        _exit(127);
    }
    // Until a temporary file beside the target holds bytes (or the process ends).
    fs::path tmp;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        for (const auto& e : fs::directory_iterator(d)) {
            if (e.path() != target && e.file_size() > (1 << 20)) tmp = e.path();
        }
        if (!tmp.empty()) break;
        usleep(1000);
    }
    ASSERT_FALSE(tmp.empty()) << "the write ended before it could be interrupted";
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(fs::file_size(target), before);
    EXPECT_EQ(model::Model::load(target.string())->hparams().n_vocab,
              model::Model::load(fixture_model())->hparams().n_vocab);
    EXPECT_EQ(tmp.filename().string().rfind(".model.gguf.tmp-", 0), 0u) << tmp;
    fs::remove_all(d);
}
