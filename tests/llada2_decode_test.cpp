// LLaDA 2.x decoding (policy llada2, decode/block_diffusion.h) against the reference's
// trajectories (tests/data/llada2/decode.json, train/make_llada2_decode_fixtures.py: LLaDA2.0's
// generate() and LLaDA2.1's token editing in float64 without a KV cache). The engine decodes
// with earlier blocks in the cache, so equal trajectories also show that caching them is exact.
// Every step's commits and edits must be the reference's, alone and batched with another
// generation on one Scheduler, with the fused head and with logits rows.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "decode/block_diffusion.h"
#include "decode/registry.h"
#include "decode/scheduler.h"
#include "decode/stepper.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "runtime/device.h"
#include "util/error.h"

namespace llada {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kDir = fs::path(LLADA_TEST_DATA) / "llada2";

json fixture() {
    std::ifstream f(kDir / "decode.json");
    return json::parse(f);
}

// llada2-tiny.gguf with its output matrix times `scale` (a power of two: exact in float32), as
// the fixture's script scales the reference's.
fs::path scaled_model(float scale) {
    const fs::path out =
        fs::temp_directory_path() / ("llada2-decode-" + std::to_string(getpid()) + ".gguf");
    auto f = format::GgufFile::open((kDir / "llada2-tiny.gguf").string());
    format::GgufWriter w;
    for (const auto& kv : f->kvs())
        w.copy_kv(kv);
    for (const auto& t : f->tensors()) {
        std::vector<uint8_t> data(t.data, t.data + t.n_bytes);
        if (std::string(t.name) == "output.weight") {
            for (size_t i = 0; i + 4 <= data.size(); i += 4) {
                float v;
                std::memcpy(&v, data.data() + i, 4);
                v *= scale;
                std::memcpy(data.data() + i, &v, 4);
            }
        }
        w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), std::move(data));
    }
    w.write(out.string());
    return out;
}

decode::GenerateOptions options(const json& c) {
    decode::GenerateOptions o;
    o.gen = c["gen"];
    o.block = c["block"];
    o.threshold = c["threshold"];
    if (!c["editing_threshold"].is_null()) {
        o.editing_threshold = c["editing_threshold"];
        o.max_post_steps = c["max_post_steps"];
    }
    if (!c["steps"].is_null()) o.block_steps = c["steps"];
    return o;
}

// What the engine did at each step: its commits [pos, token] and edits [pos, from, to].
struct Trace {
    json steps = json::array();
    std::vector<int32_t> before;  // the canvas before the current step
};

void record(Trace& tr, const decode::StepEvent& ev) {
    json step = {{"committed", json::array()}, {"edited", json::array()}};
    for (int32_t p : ev.committed)
        step["committed"].push_back({p, ev.canvas[p]});
    for (int32_t p : ev.revised)
        step["edited"].push_back({p, tr.before[p], ev.canvas[p]});
    tr.before.assign(ev.canvas.begin(), ev.canvas.end());
    tr.steps.push_back(step);
}

void expect_trajectory(const json& c, const Trace& tr, const std::string& what) {
    const json& ref = c["trajectory"];
    ASSERT_EQ(tr.steps.size(), ref.size()) << what;
    for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_EQ(tr.steps[i]["committed"], ref[i]["committed"]) << what << " step " << i;
        EXPECT_EQ(tr.steps[i]["edited"], ref[i]["edited"]) << what << " step " << i;
    }
}

class Llada2Decoding : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        doc_ = new json(fixture());
        path_ = new fs::path(scaled_model((*doc_)["head_scale"].get<float>()));
        model_ = model::Model::load(path_->string()).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        fs::remove(*path_);
        delete path_;
        delete doc_;
    }
    static json* doc_;
    static fs::path* path_;
    static model::Model* model_;
    decode::TokenIds ids() const { return {(*doc_)["mask"], (*doc_)["eos"], -1}; }
    std::vector<int32_t> prompt() const { return (*doc_)["prompt_ids"]; }
};
json* Llada2Decoding::doc_ = nullptr;
fs::path* Llada2Decoding::path_ = nullptr;
model::Model* Llada2Decoding::model_ = nullptr;

TEST_F(Llada2Decoding, EveryStepIsTheReferencesAloneWithAndWithoutTheFusedHead) {
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::LookaheadCosts costs;
    const auto p = prompt();
    ASSERT_GE((*doc_)["min_margin"].get<double>(), 1e-3);
    for (const json& c : (*doc_)["cases"]) {
        for (bool fused : {true, false}) {
            decode::GenerateOptions o = options(c);
            o.fused_sampling = fused;
            decode::GenerationSession gs("llada2", *model_, *dev, o, static_cast<int>(p.size()), 1,
                                         costs);
            auto s = gs.stepper(o, ids(), p);
            Trace tr;
            tr.before.assign(s->result().canvas.begin(), s->result().canvas.end());
            const auto res =
                run_alone(*s, gs.session(), [&](const decode::StepEvent& ev) { record(tr, ev); });
            const std::string what = c["name"].get<std::string>() + (fused ? " fused" : " logits");
            expect_trajectory(c, tr, what);
            // The answer: the reference's canvas up to prompt + gen (past a stop, end of text).
            const auto& ref = c["canvas"];
            ASSERT_EQ(res.canvas.size(), p.size() + o.gen) << what;
            for (size_t i = 0; i < res.canvas.size(); ++i) {
                const int32_t want = ref[i] == ids().mask ? ids().eos : ref[i].get<int32_t>();
                EXPECT_EQ(res.canvas[i], want) << what << " position " << i;
            }
            EXPECT_EQ(res.stats.forwards, static_cast<int64_t>(c["trajectory"].size())) << what;
            EXPECT_EQ(res.revision.revisions, c["edits"].get<int64_t>()) << what;
        }
    }
}

// A step computes one block's rows (and the previous block's once), not the prefix: the cache
// holds the earlier blocks.
TEST_F(Llada2Decoding, AStepComputesOneBlockNotThePrefix) {
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    decode::LookaheadCosts costs;
    const auto p = prompt();
    const json& c = (*doc_)["cases"][0];
    decode::GenerateOptions o = options(c);
    decode::GenerationSession gs("llada2", *model_, *dev, o, static_cast<int>(p.size()), 1, costs);
    auto s = gs.stepper(o, ids(), p);
    const auto res = run_alone(*s, gs.session());
    const int B = o.block;
    const int first_block = static_cast<int>(p.size()) / B;
    int prev_block = -1;
    for (const auto& st : res.steps) {
        const int64_t want = st.step == 0             ? int64_t{first_block + 1} * B
                             : st.block != prev_block ? 2 * B
                                                      : B;
        EXPECT_EQ(st.rows, want) << "step " << st.step;
        prev_block = st.block;
    }
}

// Two generations of the fixture's cases on one Scheduler (one forward per step over both)
// decode what each decodes alone.
TEST_F(Llada2Decoding, BatchedGenerationsDecodeAsAlone) {
    runtime::ThreadPool pool(2);
    auto dev = runtime::make_cpu_device(pool);
    const auto p = prompt();
    const json& a = (*doc_)["cases"][0];  // LLaDA2.0, blocks of 4
    const json& b = (*doc_)["cases"][2];  // LLaDA2.1 editing, blocks of 4
    decode::GenerateOptions oa = options(a), ob = options(b);
    oa.kernels.attention_block = ob.kernels.attention_block = 4;
    const int L = decode::block_diffusion_canvas(ob, static_cast<int>(p.size()));
    runtime::KvCache kv(model_->hparams().n_layer, 2, L, model_->hparams().n_kv_head,
                        model_->hparams().head_dim, false);
    model::Session session(*model_, *dev, kv, 2 * L, 2 * L, oa.kernels);
    auto sa = decode::make_stepper("llada2", *model_, oa, ids(), p);
    auto sb = decode::make_stepper("llada2", *model_, ob, ids(), p);
    decode::Stepper* both[] = {sa.get(), sb.get()};
    decode::run_to_end(session, both);
    const auto ra = sa->take_result(), rb = sb->take_result();
    for (size_t i = 0; i < ra.canvas.size(); ++i) {
        const int32_t want =
            a["canvas"][i] == ids().mask ? ids().eos : a["canvas"][i].get<int32_t>();
        EXPECT_EQ(ra.canvas[i], want) << i;
    }
    for (size_t i = 0; i < rb.canvas.size(); ++i) {
        const int32_t want =
            b["canvas"][i] == ids().mask ? ids().eos : b["canvas"][i].get<int32_t>();
        EXPECT_EQ(rb.canvas[i], want) << i;
    }
    EXPECT_EQ(rb.revision.revisions, b["edits"].get<int64_t>());
}

TEST_F(Llada2Decoding, WhatThePolicyCannotRunIsRefusedByName) {
    const auto p = prompt();
    auto refused = [&](decode::GenerateOptions o, const std::string& words) {
        try {
            decode::make_stepper("llada2", *model_, o, ids(), p);
            ADD_FAILURE() << "accepted: " << words;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    decode::GenerateOptions o;
    o.gen = 8;
    o.block = 8;  // the file's attention blocks are 32
    refused(o, "decodes in the attention blocks of the session (32 positions");
    o.block = 32;
    o.factor = 1.0;
    refused(o, "not --factor");
    o.factor = 0.0;
    o.temperature = 0.5;
    refused(o, "decodes greedily");
    o.temperature = 0.0;
    o.editing_threshold = 0.5;
    o.block_steps = 4;
    refused(o, "--block-steps is LLaDA2.0's schedule");
    // A model that does not attend block-causally.
    auto dense = model::Model::load(std::string(LLADA_SOURCE_DIR) + "/models/tiny-llada-m.gguf");
    try {
        decode::GenerateOptions d;
        decode::make_stepper(
            "llada2", *dense, d,
            {static_cast<int32_t>(
                 dense->gguf().opt_uint("tokenizer.ggml.mask_token_id").value_or(0)),
             -1, -1},
            p);
        ADD_FAILURE() << "accepted a bidirectional model";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("decodes a block-causal model"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace llada
