// npu-sim: the simulated NPU device. Per execution it walks the plan once, running each op with
// the NPU's numerics (or the CPU's, for the ops placed there) and advancing a projected clock:
// op costs from the profile, the compile of a shape bucket on first use, and the memory runtime
// (map-on-use baseline, or the optimised window with its prefetch thread and stalls).
#include "runtime/npu_device.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "npu/cost_model.h"
#include "npu/profile.h"
#include "npu/tile_engine.h"
#include "runtime/cpu_ops.h"
#include "runtime/memory_planner.h"
#include "runtime/npu_exec.h"
#include "runtime/projection.h"
#include "runtime/swap_runtime.h"
#include "runtime/window_planner.h"
#include "util/aligned.h"
#include "util/error.h"

namespace llada::runtime {
namespace {

using npu::Category;

constexpr size_t kExpLutBytes = 64 << 10;  // the fp16 exp table in TCM (docs/npu-facts.md: 64 KiB)
constexpr size_t kPage = 4096;

// The plan as the NPU runs it: rows padded to the largest bucket, NPU matmuls reading the fp16
// activations directly (the CPU's int8 preparation skipped), attention's exp from the LUT.
struct NpuPlanModel {
    Plan plan;
    PlanProjection proj;
    WeightTable table;
};

NpuPlanModel model_plan(Plan plan, const npu::Profile& prof, WeightRecipe recipe,
                        int64_t max_bucket, int64_t max_out_bucket) {
    NpuPlanModel m;
    m.proj = project_plan(plan, true, prof.lm_head_on_npu, recipe);
    plan.max_rows = max_bucket;
    plan.max_out_rows = max_out_bucket;
    const int n = static_cast<int>(plan.ops.size());
    for (int i = 0; i < n; ++i) {
        Op& op = plan.ops[i];
        if (m.proj.where[i] == Placement::Npu && op.in0 >= 0) {
            for (int j = 0; j < i; ++j) {
                const Op& prep = plan.ops[j];
                if (prep.kind == OpKind::PrepareActs && prep.out == op.in0 &&
                    m.proj.where[j] == Placement::Skip) {
                    op.in0 = prep.in0;
                }
            }
        }
        if (m.proj.where[i] == Placement::Npu && op.kind == OpKind::Attention) op.lut = true;
    }
    for (int i = 0; i < n; ++i) {
        if (m.proj.where[i] == Placement::Skip) plan.ops[i].out = plan.ops[i].in0 = -1;
    }
    // Lifetimes after the rewiring, as PlanBuilder::finish computes them.
    for (TensorDesc& t : plan.tensors)
        t.first_op = t.last_op = -1;
    for (int i = 0; i < n; ++i) {
        const Op& op = plan.ops[i];
        if (op.out >= 0) plan.tensors[op.out].first_op = i;
        for (int in : {op.in0, op.in1}) {
            if (in >= 0) plan.tensors[in].last_op = i;
        }
        if (op.tmp >= 0) plan.tensors[op.tmp].first_op = plan.tensors[op.tmp].last_op = i;
    }
    plan.tensors[plan.output].last_op = n;
    plan_memory(plan);
    assert(memory_plan_is_valid(plan));
    m.table = weight_table(plan, m.proj, kPage);
    m.plan = std::move(plan);
    return m;
}

uint64_t plan_signature(const Plan& plan, bool with_out_rows) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) {
        h ^= v;
        h *= 1099511628211ull;
    };
    for (const Op& op : plan.ops) {
        mix(static_cast<uint64_t>(op.kind));
        mix(reinterpret_cast<uintptr_t>(op.weight.data));
        mix(op.out >= 0 ? static_cast<uint64_t>(plan.tensors[op.out].cols) : 0);
    }
    if (with_out_rows) mix(static_cast<uint64_t>(plan.max_out_rows));
    return h;
}

size_t kv_device_bytes(const Plan& plan, int64_t positions) {
    size_t b = 0;
    for (const Op& op : plan.ops) {
        if (op.kind == OpKind::Attention) {
            b += static_cast<size_t>(positions * op.n_kv_head * op.head_dim) * 2 * sizeof(uint16_t);
        }
    }
    return b;
}

// What the window must hold beside the weights: the KV cache and activations (fp16 on the
// device: half the host's float32 arena) and the exp table.
size_t reserve_bytes(const Plan& plan, int64_t kv_positions) {
    return kv_device_bytes(plan, kv_positions) + plan.arena_bytes / 2 + kExpLutBytes;
}

class NpuCompiledPlan : public CompiledPlan {
  public:
    explicit NpuCompiledPlan(NpuPlanModel model) : m(std::move(model)) {
        const size_t bytes = std::max<size_t>(64, (m.plan.arena_bytes + 63) / 64 * 64);
        arena = aligned_bytes(bytes, "npu-sim's activation arena");
        std::memset(arena.get(), 0, bytes);
        tokens.assign(m.plan.max_rows, 0);
        pos.assign(m.plan.max_rows, 0);
        seq.assign(m.plan.max_rows, 0);
        slot.assign(m.plan.max_rows, -1);
        exclude.assign(m.plan.max_rows, -1);
        own_key.assign(m.plan.max_rows, 0);
        out_rows.assign(std::max<int64_t>(1, m.plan.max_out_rows), 0);
        offset.assign(m.table.weights.size(), 0);
    }
    const Plan& plan() const override { return m.plan; }
    const float* output() const override { return view().f32(m.plan.output); }
    size_t arena_bytes() const override { return m.plan.arena_bytes; }
    ArenaView view() const { return {&m.plan, arena.get()}; }

    NpuPlanModel m;
    AlignedBytes arena;
    LmHeadScratch lm;
    NpuScratch scratch;
    std::vector<kernels::RowStats> npu_partial;
    std::vector<int> ids;        // table weight -> device weight
    std::vector<size_t> offset;  // table weight -> where the window holds it now
    uint64_t signature = 0;
    // The window layout for the KV shape it was planned for (optimised policy).
    int64_t layout_positions = -1;
    WindowLayout layout;
    std::vector<Prefetcher::Job> jobs;
    std::vector<double> finish;  // projected finish time of each streamed unit
    // The batch padded to the bucket.
    std::vector<int32_t> tokens, pos, seq, slot, exclude, own_key, out_rows;
};

// The projected clock of one forward, and what the memory runtime did.
struct ForwardTotals {
    npu::Cost cost;
    double npu_us = 0, cpu_us = 0, prefetch_us = 0;
    int64_t ops_npu = 0, ops_cpu = 0;
    int64_t maps = 0, unmaps = 0;
    size_t mapped = 0, copied = 0;
    double frag_sum = 0;
    int64_t frag_n = 0;
};

struct NoHooks {
    void before_unit(int) {}
    void after_unit(int) {}
    void mapped(int, size_t) {}
    void run(int) {}
};

class NpuSimDevice;

class NpuBuffer : public DeviceBuffer {
  public:
    NpuBuffer(NpuSimDevice& dev, size_t bytes) : dev_(dev), bytes_(bytes) {}
    size_t size() const override { return bytes_.size(); }
    void* map() override;
    void unmap() override;
    bool mapped() const override { return mapped_; }

  private:
    NpuSimDevice& dev_;
    std::vector<uint8_t> bytes_;
    bool mapped_ = false;
};

class NpuSimDevice : public Device {
  public:
    NpuSimDevice(ThreadPool& pool, const NpuSimOptions& o) : ops_(pool), opt_(o) {
        npu_ = npu::find_profile(o.profile);
        if (npu_.kind != npu::Profile::Kind::Npu) {
            throw Error("profile '" + o.profile +
                        "' is a CPU profile; npu-sim needs an NPU profile (sm8650, sm8750, "
                        "sm8550), or use --device cpu to project onto it");
        }
        npu_.apply_overrides(o.profile_overrides);
        cpu_ = npu::find_profile(npu_.cpu_profile);
        cpu_.apply_overrides(o.profile_overrides);
        if (o.memory != "optimised" && o.memory != "baseline") {
            throw Error("--npu-memory must be 'optimised' or 'baseline', got '" + o.memory + "'");
        }
        optimised_ = o.memory == "optimised";
        recipe_ = parse_weight_recipe(o.weights);
        if (o.ring_slots < 1 || o.ring_slots > 64) {
            throw Error("ring slots must be in [1, 64], got " + std::to_string(o.ring_slots));
        }
        if (npu_.window_bytes < 65536) {
            throw Error("the NPU window must be at least 64 KiB, got " +
                        std::to_string(npu_.window_bytes) + " bytes");
        }
        buckets_ = o.buckets;
        std::sort(buckets_.begin(), buckets_.end());
        for (int64_t b : buckets_) {
            if (b <= 0 || b % npu_.tile_rows != 0) {
                throw Error("shape bucket " + std::to_string(b) +
                            " is not a positive multiple of the " + std::to_string(npu_.tile_rows) +
                            "-row tile");
            }
        }
        reset_report();
    }

    std::string name() const override { return "npu-sim"; }

    DeviceCaps caps() const override {
        DeviceCaps c;
        c.name = "npu-sim";
        c.profile = npu_.name;
        c.projected = true;
        c.functional = !opt_.timing_only;
        c.tile_rows = npu_.tile_rows;
        c.window_bytes = npu_.window_bytes;
        c.memory_policy = opt_.memory;
        return c;
    }

    int64_t bucket_for(int64_t rows) const override {
        if (buckets_.empty()) return npu::padded_rows(std::max<int64_t>(rows, 1), npu_.tile_rows);
        for (int64_t b : buckets_) {
            if (b >= rows) return b;
        }
        std::string list;
        for (int64_t b : buckets_)
            list += (list.empty() ? "" : ", ") + std::to_string(b);
        throw Error("npu-sim: " + std::to_string(rows) + " rows exceed the largest shape bucket (" +
                    list + ")");
    }

    std::unique_ptr<CompiledPlan> compile(Plan plan) override {
        for (const Op& op : plan.ops) {
            if (op.kind == OpKind::MoeFfn) {
                throw Error(
                    "npu-sim does not run mixture-of-experts layers (llada-moe) yet: use "
                    "--device cpu");
            }
        }
        const int64_t max_bucket = bucket_for(plan.max_rows);
        const int64_t max_out = npu_.lm_head_on_npu
                                    ? npu::padded_rows(plan.max_out_rows, npu_.tile_rows)
                                    : plan.max_out_rows;
        auto cp = std::make_unique<NpuCompiledPlan>(
            model_plan(std::move(plan), npu_, recipe_, max_bucket, max_out));
        const Plan& p = cp->plan();
        cp->lm.size_for(p, ops_.pool().size());
        int64_t max_k = 0;
        for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
            const Op& op = p.ops[i];
            if (cp->m.table.op_weight[i] < 0) continue;
            max_k = std::max(max_k, op.weight.n_cols);
            if (op.kind == OpKind::LmHeadReduce) {
                cp->npu_partial.assign(
                    static_cast<size_t>((op.weight.n_rows + 31) / 32 * p.max_out_rows), {});
            }
        }
        if (!opt_.timing_only) {
            cp->scratch.size_for(ops_.pool().size(), max_k, std::max(p.max_rows, p.max_out_rows));
        }
        // Tile-format copies of the NPU's weights, converted once per device.
        for (const auto& w : cp->m.table.weights) {
            int op_index = -1;
            for (int i = 0; i < static_cast<int>(p.ops.size()) && op_index < 0; ++i) {
                const int tw = cp->m.table.op_weight[i];
                if (tw >= 0 && cp->m.table.weights[tw].key == w.key) op_index = i;
            }
            const Op& op = p.ops[op_index];
            cp->ids.push_back(
                device_weight(op.weight, npu_weight_type(op.weight.type, w.name, recipe_)));
        }
        // Fail early when one layer cannot fit beside the activations (the KV cache is added at
        // the first execution, when its size is known).
        plan_window(cp->m.table, reserve_bytes(p, 0), npu_.window_bytes, opt_.ring_slots);
        cp->signature = plan_signature(p, npu_.lm_head_on_npu);
        return cp;
    }

    void compile_bucket(CompiledPlan& compiled, int64_t rows) override {
        auto& cp = static_cast<NpuCompiledPlan&>(compiled);
        npu::Cost one;
        ensure_bucket(cp, bucket_for(rows), one);
        report_.projected_us += one;
        report_.one_time_us += one.total();
    }

    void execute(CompiledPlan& compiled, const Batch& batch, KvCache& kv,
                 const OpObserver* observer) override {
        const auto t0 = std::chrono::steady_clock::now();
        auto& cp = static_cast<NpuCompiledPlan&>(compiled);
        const Plan& plan = cp.plan();
        const int64_t bucket = bucket_for(batch.n_rows);
        assert(bucket <= plan.max_rows && batch.n_out <= plan.max_out_rows);
        const int64_t out_bucket =
            npu_.lm_head_on_npu ? npu::padded_rows(batch.n_out, npu_.tile_rows) : batch.n_out;
        const ExecShape shape = exec_shape(plan, batch, bucket, out_bucket);
        const bool functional = !opt_.timing_only;

        npu::Cost one;  // one-time costs: compile, first load of the window
        ensure_bucket(cp, bucket, one);
        ensure_memory(cp, kv, one);

        if (batch.gumbel != nullptr && npu_.lm_head_on_npu) {
            throw Error(
                "npu-sim: the Gumbel-max LM head runs on the CPU; this profile places the LM head "
                "on the NPU (give --full-logits for T > 0)");
        }
        // The batch padded to the bucket: padding rows repeat row 0's position and sequence and
        // hold zero activations; they are computed like any row and never stored in the cache.
        Batch padded = batch;
        for (int64_t r = 0; r < bucket; ++r) {
            const int64_t src = r < batch.n_rows ? r : 0;
            cp.tokens[r] = batch.tokens[src];
            cp.pos[r] = batch.pos[src];
            cp.seq[r] = batch.seq[src];
            cp.slot[r] = r < batch.n_rows ? batch.slot_of(src) : -1;
            cp.exclude[r] = batch.exclude_of(src);
            // A revision check's own key (--revise-tail dense): folded in as one more softmax
            // term after the tiled attention, with exact exp (runtime/cpu_ops.cpp).
            cp.own_key[r] = r < batch.n_rows && batch.own_key_of(src) ? 1 : 0;
        }
        for (int64_t i = 0; i < out_bucket; ++i)
            cp.out_rows[i] = i < batch.n_out ? batch.out_rows[i] : 0;
        padded.n_rows = bucket;
        padded.tokens = cp.tokens.data();
        padded.pos = cp.pos.data();
        padded.seq = cp.seq.data();
        padded.slot = cp.slot.data();
        padded.exclude = cp.exclude.data();
        padded.own_key = batch.own_key != nullptr ? cp.own_key.data() : nullptr;
        padded.n_out = out_bucket;
        padded.out_rows = cp.out_rows.data();

        if (optimised_) {
            // Streamed weights overwrite whatever the window held at their slots.
            for (int u : cp.layout.streamed) {
                for (int w : cp.m.table.units[u].weights)
                    content_.record(cp.layout.weight_offset[w], cp.m.table.weights[w].bytes, -1);
            }
        }
        const bool streaming = optimised_ && functional && !cp.layout.streamed.empty();
        if (streaming) prefetcher_->start(&cp.jobs, cp.layout.n_slots);
        struct Hooks {
            NpuSimDevice& d;
            NpuCompiledPlan& cp;
            const Batch& padded;
            const Batch& real;
            KvCache& kv;
            const OpObserver* observer;
            bool functional, streaming;
            void before_unit(int j) {
                if (streaming) d.prefetcher_->wait_ready(j);
            }
            void after_unit(int j) {
                if (streaming) d.prefetcher_->release(j);
            }
            void mapped(int tw, size_t offset) {
                cp.offset[tw] = offset;
                const TileWeight& w = d.weights_[cp.ids[tw]];
                d.content_.record(offset, w.bytes(), cp.ids[tw]);
                if (functional) std::memcpy(d.window_->data() + offset, w.data, w.bytes());
            }
            void run(int i) {
                if (functional) d.run_op(cp, i, padded, real, kv);
                const Op& op = cp.plan().ops[i];
                if (observer && op.out >= 0 && op.kind != OpKind::PrepareActs &&
                    op.kind != OpKind::LmHeadReduce) {
                    const TensorDesc& t = cp.plan().tensors[op.out];
                    (*observer)(i, op, t, cp.view().f32(op.out),
                                t.rows == RowSpace::Window ? real.n_rows : real.n_out);
                }
            }
        } hooks{*this, cp, padded, batch, kv, observer, functional, streaming};
        MapOnUse* base = optimised_ ? nullptr : baseline_.get();
        const ForwardTotals f = timeline(cp.m, cp.ids, optimised_ ? &cp.layout : nullptr, base,
                                         shape, cp.finish, hooks);
        if (streaming) prefetcher_->finish();
        if (!functional) {
            std::memset(cp.view().data(plan.output), 0,
                        plan.tensors[plan.output].row_bytes * static_cast<size_t>(batch.n_out));
        }

        DeviceReport& r = report_;
        r.executions += 1;
        r.ops_npu += f.ops_npu;
        r.ops_cpu += f.ops_cpu;
        r.rows += batch.n_rows;
        r.padded_rows += bucket;
        r.projected_us += f.cost;
        r.projected_us += one;
        r.one_time_us += one.total();
        r.npu_us += f.npu_us;
        r.cpu_us += f.cpu_us;
        r.prefetch_us += f.prefetch_us;
        r.mappings += f.maps;
        r.unmappings += f.unmaps;
        r.bytes_mapped += f.mapped;
        r.bytes_copied += f.copied;
        frag_sum_ += f.frag_sum;
        frag_n_ += f.frag_n;
        if (optimised_) {
            r.fragmentation = cp.layout.fragmentation;
            r.resident_bytes = cp.layout.resident_bytes;
            r.streamed_bytes = cp.layout.streamed_bytes;
            r.ring_slots = cp.layout.n_slots;
            r.window_peak = std::max(r.window_peak, cp.layout.resident_end +
                                                        cp.layout.n_slots * cp.layout.slot_bytes +
                                                        cp.layout.reserved_bytes);
        } else {
            r.fragmentation = frag_n_ > 0 ? frag_sum_ / static_cast<double>(frag_n_) : 0.0;
            r.window_peak = std::max(r.window_peak, baseline_->window().peak_used() +
                                                        npu_.window_bytes - baseline_->capacity());
        }
        r.host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    std::vector<LatencyEntry> latency_table(const Plan& plan, std::span<const int64_t> rows,
                                            int64_t kv_len) override {
        const int64_t max_bucket = bucket_for(plan.max_rows);
        const int64_t max_out = npu_.lm_head_on_npu
                                    ? npu::padded_rows(plan.max_out_rows, npu_.tile_rows)
                                    : plan.max_out_rows;
        const NpuPlanModel m = model_plan(plan, npu_, recipe_, max_bucket, max_out);
        const size_t reserve = reserve_bytes(m.plan, kv_len);
        WindowLayout layout;
        if (optimised_) layout = plan_window(m.table, reserve, npu_.window_bytes, opt_.ring_slots);
        std::vector<int> ids(m.table.weights.size());
        for (size_t i = 0; i < ids.size(); ++i)
            ids[i] = static_cast<int>(i);
        std::vector<double> finish;
        std::vector<LatencyEntry> out;
        for (int64_t r : rows) {
            if (r < 1 || r > plan.max_rows) {
                throw Error("latency table: " + std::to_string(r) +
                            " rows is outside the plan's [1, " + std::to_string(plan.max_rows) +
                            "]");
            }
            ExecShape s;
            s.rows = r;
            s.bucket = bucket_for(r);
            s.n_out = std::min(r, plan.max_out_rows);
            s.out_bucket =
                npu_.lm_head_on_npu ? npu::padded_rows(s.n_out, npu_.tile_rows) : s.n_out;
            s.keys = kv_len;
            s.n_seq = 1;
            NoHooks hooks;
            ForwardTotals f;
            if (optimised_) {
                f = timeline(m, ids, &layout, nullptr, s, finish, hooks);
            } else {
                // Steady state of the baseline: the second of two forwards from an empty window.
                MapOnUse sim(baseline_capacity(reserve), kPage);
                timeline(m, ids, nullptr, &sim, s, finish, hooks);
                f = timeline(m, ids, nullptr, &sim, s, finish, hooks);
            }
            LatencyEntry e;
            e.rows = r;
            e.bucket = s.bucket;
            e.projected_ms = f.cost.total() / 1e3;
            e.npu_ms = f.npu_us / 1e3;
            e.cpu_ms = f.cpu_us / 1e3;
            Plan sized = m.plan;
            sized.max_rows = s.bucket;
            e.arena_bytes = plan_memory(sized).arena_bytes;
            e.kv_bytes = kv_device_bytes(m.plan, kv_len);
            out.push_back(e);
        }
        return out;
    }

    std::unique_ptr<DeviceBuffer> alloc_buffer(size_t bytes) override {
        return std::make_unique<NpuBuffer>(*this, bytes);
    }

    const DeviceReport* report() const override { return &report_; }
    void reset_report() override {
        report_ = {};
        report_.device = "npu-sim";
        report_.profile = npu_.name;
        report_.memory_policy = opt_.memory;
        report_.projected = true;
        report_.functional = !opt_.timing_only;
        report_.window_bytes = npu_.window_bytes;
        for (const TileWeight& t : weights_)  // the copies live as long as the device
            if (t.host) report_.host_tile_copy_bytes += t.bytes();
        report_.weight_conversion = conversion_summary();
        frag_sum_ = 0;
        frag_n_ = 0;
    }

    // Charged by NpuBuffer.
    void charge_map(size_t bytes, bool map) {
        if (map) {
            report_.mappings += 1;
            report_.bytes_mapped += bytes;
            report_.projected_us.add(Category::MapUnmap, npu::map_us(npu_, bytes));
        } else {
            report_.unmappings += 1;
            report_.projected_us.add(Category::MapUnmap, npu::unmap_us(npu_, bytes));
        }
    }

  private:
    // The window left for weights beside the reserve under the baseline policy.
    size_t baseline_capacity(size_t reserve) const {
        const size_t window = npu::AddressWindow(npu_.window_bytes).capacity();
        const size_t r = (reserve + kPage - 1) / kPage * kPage;
        if (r >= window) {
            throw Error("npu-sim: the device window of " + std::to_string(window >> 20) +
                        " MiB cannot hold the KV cache and activations (" +
                        std::to_string(reserve >> 20) +
                        " MiB); use a shorter context or a "
                        "larger window");
        }
        return window - r;
    }

    int device_weight(const kernels::WeightView& w, quant::TileType type) {
        auto it = weight_ids_.find(w.data);
        if (it != weight_ids_.end()) return it->second;
        TileWeight t;
        if (opt_.timing_only) {
            t.key = w.data;
            t.layout = quant::tile_layout(type, w.n_rows, w.n_cols);
        } else {
            t = convert_to_tiles(ops_, w, type);
            if (t.host) report_.host_tile_copy_bytes += t.bytes();
        }
        weights_.push_back(std::move(t));
        const int id = static_cast<int>(weights_.size()) - 1;
        weight_ids_.emplace(w.data, id);
        conversions_[{w.type, type}] += 1;
        report_.weight_conversion = conversion_summary();
        return id;
    }

    // "Q4_K -> TQ4 (13), Q6_K -> TQ8 (3)": which file formats the NPU reads in which tile
    // format, converted once when a plan is compiled (a tile format in the file is read in place).
    std::string conversion_summary() const {
        std::string s;
        for (const auto& [key, count] : conversions_) {
            const char* from = format::tensor_type_info(key.first).name;
            const char* to = quant::tile_type_name(key.second);
            if (!s.empty()) s += ", ";
            s += std::string(from) +
                 (quant::tile_type_of(key.first) == key.second ? " as is"
                                                               : " -> " + std::string(to)) +
                 " (" + std::to_string(count) + ")";
        }
        return s;
    }

    void ensure_bucket(NpuCompiledPlan& cp, int64_t bucket, npu::Cost& one) {
        if (!cp.m.proj.any_npu) return;
        if (compiled_.insert({cp.signature, bucket}).second) {
            one.add(Category::Compile, npu::compile_us(npu_, cp.m.proj.n_layers));
            report_.buckets_compiled += 1;
        }
    }

    // Puts the plan's weights where the memory policy wants them before a forward.
    void ensure_memory(NpuCompiledPlan& cp, const KvCache& kv, npu::Cost& one) {
        const int64_t positions = static_cast<int64_t>(kv.n_seq()) * kv.n_pos();
        const size_t reserve = reserve_bytes(cp.plan(), positions);
        const bool functional = !opt_.timing_only;
        if (functional && !window_) {
            window_ = std::make_unique<WindowBuffer>(npu_.window_bytes);
            prefetcher_ = std::make_unique<Prefetcher>();
        }
        if (!optimised_) {
            const size_t capacity = baseline_capacity(reserve);
            if (!baseline_ || baseline_->capacity() != capacity) {
                if (baseline_) {
                    report_.unmappings += static_cast<int64_t>(baseline_->window().live()) + 1;
                }
                baseline_ = std::make_unique<MapOnUse>(capacity, kPage);
                content_.clear();
                // The KV cache and activations: one persistent mapping.
                report_.mappings += 1;
                one.add(Category::MapUnmap, npu::map_us(npu_, reserve));
            }
            return;
        }
        if (cp.layout_positions != positions) {
            cp.layout = plan_window(cp.m.table, reserve, npu_.window_bytes, opt_.ring_slots);
            assert(check_window_layout(cp.layout, cp.m.table).empty());
            cp.layout_positions = positions;
            for (size_t w = 0; w < cp.offset.size(); ++w)
                cp.offset[w] = cp.layout.weight_offset[w];
            cp.finish.assign(cp.layout.streamed.size(), 0.0);
            cp.jobs.clear();
            if (functional) {
                for (int u : cp.layout.streamed) {
                    Prefetcher::Job job;
                    for (int w : cp.m.table.units[u].weights) {
                        const TileWeight& t = weights_[cp.ids[w]];
                        job.push_back(
                            {t.data, window_->data() + cp.layout.weight_offset[w], t.bytes()});
                    }
                    cp.jobs.push_back(std::move(job));
                }
            }
        }
        // The layout's few large mappings, once per distinct layout: the weight regions
        // (resident region, ring slots) and the reserve (KV cache, activations) apart, so plans
        // that differ only in their activations (the two output heads) share the weight mappings.
        const auto weights = std::make_tuple(cp.layout.resident_end, cp.layout.ring_offset,
                                             cp.layout.slot_bytes, cp.layout.n_slots);
        if (!active_weights_ || *active_weights_ != weights) {
            if (active_weights_) report_.unmappings += active_weight_mappings_;
            active_weights_ = weights;
            active_weight_mappings_ = (cp.layout.resident_end > 0 ? 1 : 0) + cp.layout.n_slots;
            report_.mappings += active_weight_mappings_;
            if (cp.layout.resident_end > 0) {
                one.add(Category::MapUnmap, npu::map_us(npu_, cp.layout.resident_end));
            }
            for (int s = 0; s < cp.layout.n_slots; ++s)
                one.add(Category::MapUnmap, npu::map_us(npu_, cp.layout.slot_bytes));
            report_.bytes_mapped += cp.layout.resident_end +
                                    static_cast<size_t>(cp.layout.n_slots) * cp.layout.slot_bytes;
        }
        const auto reserve_region =
            std::make_pair(cp.layout.reserved_offset, cp.layout.reserved_bytes);
        if (!active_reserve_ || *active_reserve_ != reserve_region) {
            if (active_reserve_) report_.unmappings += 1;
            active_reserve_ = reserve_region;
            report_.mappings += 1;
            one.add(Category::MapUnmap, npu::map_us(npu_, cp.layout.reserved_bytes));
            report_.bytes_mapped += cp.layout.reserved_bytes;
        }
        // Resident weights not yet in place are copied in before the forward (synchronously).
        for (size_t w = 0; w < cp.m.table.weights.size(); ++w) {
            if (cp.layout.unit_slot[cp.m.table.weights[w].unit] >= 0) continue;
            const size_t off = cp.layout.weight_offset[w];
            const int id = cp.ids[w];
            if (content_.holds(off, id)) continue;
            const TileWeight& t = weights_[id];
            if (functional) std::memcpy(window_->data() + off, t.data, t.bytes());
            content_.record(off, t.bytes(), id);
            one.add(Category::Copy, npu::copy_us(npu_, t.bytes()));
            report_.bytes_copied += t.bytes();
        }
    }

    template <typename Hooks>
    ForwardTotals timeline(const NpuPlanModel& m, const std::vector<int>& ids,
                           const WindowLayout* layout, MapOnUse* base, const ExecShape& s,
                           std::vector<double>& finish, Hooks& hooks) const {
        ForwardTotals f;
        const Plan& plan = m.plan;
        double t = 0;  // projected clock of this forward
        if (m.proj.any_npu) {
            f.cost.add(Category::Dispatch, npu_.graph_call_us);
            t += npu_.graph_call_us;
        }
        double prefetch_end = 0;
        if (layout) finish.assign(layout->streamed.size(), 0.0);
        for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) {
            const Placement where = m.proj.where[i];
            if (where == Placement::Skip) continue;
            const int tw = m.table.op_weight[i];
            const int u = tw >= 0 ? m.table.weights[tw].unit : -1;
            const int j = layout && u >= 0 ? layout->stream_index[u] : -1;
            if (j >= 0 && i == m.table.units[u].first_op) {
                // The prefetch thread copies unit j once its slot is free (unit j - slots has
                // finished) and the previous copy is done; the NPU stalls if it arrives first.
                const int slots = layout->n_slots;
                const double start = std::max(prefetch_end, j >= slots ? finish[j - slots] : 0.0);
                const double copy = npu::copy_us(npu_, m.table.units[u].bytes);
                prefetch_end = start + copy;
                f.prefetch_us += copy;
                for (int w : m.table.units[u].weights)
                    f.copied += m.table.weights[w].bytes;
                const double stall = std::max(0.0, prefetch_end - t);
                f.cost.add(Category::Stall, stall);
                t += stall;
                hooks.before_unit(j);
            }
            if (base && tw >= 0) {
                const size_t bytes = m.table.weights[tw].bytes;
                const MapOnUse::Step st = base->touch(ids[tw], bytes);
                if (!st.hit) {
                    const double us =
                        npu::map_us(npu_, bytes) + st.unmaps * npu_.unmap_fixed_us +
                        npu_.unmap_us_per_mib * static_cast<double>(st.unmapped_bytes) / (1 << 20);
                    f.cost.add(Category::MapUnmap, us);
                    t += us;
                    f.maps += 1;
                    f.unmaps += st.unmaps;
                    f.mapped += bytes;
                    f.frag_sum += st.fragmentation;
                    f.frag_n += 1;
                    hooks.mapped(tw, st.offset);
                }
            }
            hooks.run(i);
            const npu::Profile& prof = where == Placement::Npu ? npu_ : cpu_;
            const npu::Cost c = npu::op_cost(prof, op_work(plan, m.proj, i, prof, s));
            f.cost += c;
            t += c.total();
            if (where == Placement::Npu) {
                f.npu_us += c.total();
                f.ops_npu += 1;
            } else {
                f.cpu_us += c.total();
                f.ops_cpu += 1;
            }
            if (j >= 0 && i == m.table.units[u].last_op) {
                finish[j] = t;
                hooks.after_unit(j);
            }
        }
        return f;
    }

    const uint8_t* weight_data(const NpuCompiledPlan& cp, int tw) const {
        return window_->data() + cp.offset[tw];
    }

    void run_op(NpuCompiledPlan& cp, int i, const Batch& padded, const Batch& real, KvCache& kv) {
        const Plan& plan = cp.plan();
        const Op& op = plan.ops[i];
        const ArenaView a = cp.view();
        if (cp.m.proj.where[i] == Placement::Cpu) {
            ops_.run(a, cp.lm, op, real, kv);
            if (op.kind == OpKind::Embed) {
                // The NPU receives fp16 rows; its padding rows are zeros.
                const int64_t d = plan.tensors[op.out].cols;
                float* x = a.f32(op.out);
                std::memset(x + real.n_rows * d, 0,
                            sizeof(float) * static_cast<size_t>((padded.n_rows - real.n_rows) * d));
                round_rows_to_fp16(ops_, x, d, real.n_rows);
            }
            return;
        }
        const bool window = op.out < 0 || plan.tensors[op.out].rows == RowSpace::Window;
        const int64_t rows = window ? padded.n_rows : padded.n_out;
        const int tw = cp.m.table.op_weight[i];
        switch (op.kind) {
            case OpKind::MatMul: {
                const TileWeight& w = weights_[cp.ids[tw]];
                npu_matmul(ops_, cp.scratch, a.f32(op.in0), rows, w.layout, weight_data(cp, tw),
                           a.f32(op.out));
                return;
            }
            case OpKind::LmHeadReduce: {
                const TileWeight& w = weights_[cp.ids[tw]];
                npu_lm_head_reduce(ops_, cp.scratch, a.f32(op.in0), rows, real.n_out, w.layout,
                                   weight_data(cp, tw), cp.npu_partial,
                                   reinterpret_cast<kernels::RowStats*>(a.data(op.out)));
                return;
            }
            case OpKind::StoreKV:
                ops_.run(a, cp.lm, op, real, kv);  // only the real rows enter the cache
                return;
            default:
                ops_.run(a, cp.lm, op, padded, kv);
                if (op.out >= 0 &&
                    plan.tensors[op.out].row_bytes ==
                        sizeof(float) * static_cast<size_t>(plan.tensors[op.out].cols)) {
                    round_rows_to_fp16(ops_, a.f32(op.out), plan.tensors[op.out].cols, rows);
                }
                return;
        }
    }

    CpuOps ops_;
    NpuSimOptions opt_;
    npu::Profile npu_, cpu_;
    bool optimised_ = true;
    WeightRecipe recipe_ = WeightRecipe::Model;
    std::vector<int64_t> buckets_;
    std::vector<TileWeight> weights_;
    std::unordered_map<const uint8_t*, int> weight_ids_;
    std::map<std::pair<format::TensorType, quant::TileType>, int> conversions_;
    std::set<std::pair<uint64_t, int64_t>> compiled_;  // (plan signature, bucket)
    // Memory runtime.
    std::unique_ptr<WindowBuffer> window_;
    std::unique_ptr<Prefetcher> prefetcher_;
    WindowContent content_;
    std::unique_ptr<MapOnUse> baseline_;
    std::optional<std::tuple<size_t, size_t, size_t, int>> active_weights_;
    int64_t active_weight_mappings_ = 0;
    std::optional<std::pair<size_t, size_t>> active_reserve_;
    DeviceReport report_;
    double frag_sum_ = 0;
    int64_t frag_n_ = 0;
};

void* NpuBuffer::map() {
    if (!mapped_) dev_.charge_map(bytes_.size(), true);
    mapped_ = true;
    return bytes_.data();
}

void NpuBuffer::unmap() {
    if (mapped_) dev_.charge_map(bytes_.size(), false);
    mapped_ = false;
}

}  // namespace

std::unique_ptr<Device> make_npu_sim_device(ThreadPool& pool, const NpuSimOptions& options) {
    return std::make_unique<NpuSimDevice>(pool, options);
}

}  // namespace llada::runtime
