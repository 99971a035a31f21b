// The CPU device: runs each op of a plan with the SIMD kernels, split over the thread pool
// (runtime/cpu_ops.cpp). Optionally projects every execution onto a phone CPU profile.
#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "npu/profile.h"
#include "runtime/cpu_ops.h"
#include "runtime/device.h"
#include "runtime/memory_planner.h"
#include "runtime/projection.h"
#include "util/aligned.h"
#include "util/error.h"

namespace llada::runtime {
namespace {

class CpuCompiledPlan : public CompiledPlan {
  public:
    CpuCompiledPlan(Plan plan, int n_threads) : plan_(std::move(plan)) {
        plan_memory(plan_);
        assert(memory_plan_is_valid(plan_));
        const size_t bytes = std::max<size_t>(64, (plan_.arena_bytes + 63) / 64 * 64);
        arena_ = aligned_bytes(
            bytes, "the activation arena (" + std::to_string(plan_.max_rows) + " rows)");
        std::memset(arena_.get(), 0, bytes);
        lm.size_for(plan_, n_threads);
    }
    const Plan& plan() const override { return plan_; }
    const float* output() const override {
        return reinterpret_cast<const float*>(view().data(plan_.output));
    }
    size_t arena_bytes() const override { return plan_.arena_bytes; }

    ArenaView view() const { return {&plan_, arena_.get()}; }
    LmHeadScratch lm;
    PlanProjection proj;  // when the device projects

  private:
    Plan plan_;
    AlignedBytes arena_;
};

class CpuDevice : public Device {
  public:
    CpuDevice(ThreadPool& pool, const CpuDeviceOptions& options) : ops_(pool), options_(options) {
        if (!options.projection_profile.empty()) {
            profile_ = npu::find_profile(options.projection_profile);
            if (profile_.kind != npu::Profile::Kind::Cpu) {
                throw Error("the cpu device projects onto a CPU profile (e.g. sm8750-cpu); '" +
                            profile_.name + "' is an NPU profile: use --device npu-sim");
            }
            profile_.apply_overrides(options.profile_overrides);
            projected_ = true;
        } else if (options.timing_only) {
            throw Error("timing-only execution needs a projection profile (e.g. sm8750-cpu)");
        }
        reset_report();
    }
    std::string name() const override { return "cpu"; }

    DeviceCaps caps() const override {
        DeviceCaps c;
        c.name = "cpu";
        c.profile = projected_ ? profile_.name : "";
        c.projected = projected_;
        c.functional = !options_.timing_only;
        return c;
    }

    std::unique_ptr<CompiledPlan> compile(Plan plan) override {
        auto cp = std::make_unique<CpuCompiledPlan>(std::move(plan), ops_.pool().size());
        if (projected_) cp->proj = project_plan(cp->plan(), false, false, WeightRecipe::Model);
        return cp;
    }

    void execute(CompiledPlan& compiled, const Batch& batch, KvCache& kv,
                 const OpObserver* observer) override {
        const auto t0 = std::chrono::steady_clock::now();
        auto& cp = static_cast<CpuCompiledPlan&>(compiled);
        const Plan& plan = cp.plan();
        assert(batch.n_rows <= plan.max_rows && batch.n_out <= plan.max_out_rows);
        const ArenaView a = cp.view();
        const ExecShape shape =
            projected_ ? exec_shape(plan, batch, batch.n_rows, batch.n_out) : ExecShape{};
        for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) {
            const Op& op = plan.ops[i];
            if (!options_.timing_only) ops_.run(a, cp.lm, op, batch, kv);
            if (projected_) {
                const npu::Cost c =
                    npu::op_cost(profile_, op_work(plan, cp.proj, i, profile_, shape));
                report_.projected_us += c;
                report_.cpu_us += c.total();
            }
            if (observer && op.out >= 0 && op.kind != OpKind::PrepareActs &&
                op.kind != OpKind::LmHeadReduce) {
                const TensorDesc& d = plan.tensors[op.out];
                (*observer)(i, op, d, a.f32(op.out),
                            d.rows == RowSpace::Window ? batch.n_rows : batch.n_out);
            }
        }
        if (options_.timing_only) {
            std::memset(a.data(plan.output), 0, plan.tensors[plan.output].row_bytes * batch.n_out);
        }
        report_.executions += 1;
        report_.ops_cpu += static_cast<int64_t>(plan.ops.size());
        report_.rows += batch.n_rows;
        report_.padded_rows += batch.n_rows;
        report_.host_s +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    std::vector<LatencyEntry> latency_table(const Plan& plan, std::span<const int64_t> rows,
                                            int64_t kv_len) override {
        std::vector<LatencyEntry> out;
        if (!projected_) return out;
        const PlanProjection proj = project_plan(plan, false, false, WeightRecipe::Model);
        for (int64_t r : rows) {
            ExecShape s{r, r, r, r, kv_len, 1};
            LatencyEntry e;
            e.rows = r;
            e.bucket = r;
            for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) {
                e.projected_ms +=
                    npu::op_cost(profile_, op_work(plan, proj, i, profile_, s)).total() / 1e3;
            }
            e.cpu_ms = e.projected_ms;
            Plan sized = plan;
            sized.max_rows = r;
            sized.max_out_rows = std::min(sized.max_out_rows, r);
            e.arena_bytes = plan_memory(sized).arena_bytes;
            for (const Op& op : plan.ops) {
                if (op.kind == OpKind::Attention) {
                    e.kv_bytes += static_cast<size_t>(kv_len * op.n_kv_head * op.head_dim) * 2 *
                                  (op.kv_f16 ? 2 : sizeof(float));
                }
            }
            out.push_back(e);
        }
        return out;
    }

    const DeviceReport* report() const override { return &report_; }
    void reset_report() override {
        report_ = {};
        report_.device = "cpu";
        report_.profile = projected_ ? profile_.name : "";
        report_.projected = projected_;
        report_.functional = !options_.timing_only;
    }

  private:
    CpuOps ops_;
    CpuDeviceOptions options_;
    npu::Profile profile_;
    bool projected_ = false;
    DeviceReport report_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(ThreadPool& pool) {
    return std::make_unique<CpuDevice>(pool, CpuDeviceOptions{});
}

std::unique_ptr<Device> make_cpu_device(ThreadPool& pool, const CpuDeviceOptions& options) {
    return std::make_unique<CpuDevice>(pool, options);
}

}  // namespace llada::runtime
