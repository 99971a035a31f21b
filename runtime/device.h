// The device interface: compile a plan once (its shape buckets on first use), then execute it
// many times. Devices: `cpu` (flexible shapes, SIMD kernels) and `npu-sim` (a functional and
// timing simulator of a Hexagon-class NPU; runtime/npu_device.h). Nothing above runtime/ knows
// which device runs: decoding and the model see only this interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/device_report.h"
#include "runtime/kv_cache.h"
#include "runtime/plan.h"
#include "runtime/thread_pool.h"

namespace llada::runtime {

// One execution: a window of rows (token, RoPE position, sequence, cache slot, excluded key) and
// the rows whose logits are wanted. Arrays are owned by the caller and must outlive the call.
//
// Row addressing (docs/step-engine.md): a row's K/V is written to `slot[r]` of its sequence's
// cache, or nowhere when slot[r] < 0 (a draft or shadow row whose K/V nothing may keep); its
// query attends to the slots [0, kv_len[seq]) of its sequence (causal models: [0, pos]) except
// `exclude[r]` when that is >= 0 (a shadow row at an occupied position that must not see the
// token there). Every window row's K/V is stored before any row attends, so rows of one forward
// see each other through the cache. Several sequences may share one forward, each against its
// own cache slots; two rows may not write the same (sequence, slot) in one forward.
struct Batch {
    int64_t n_rows = 0;
    const int32_t* tokens = nullptr;  // [n_rows]
    const int32_t* pos = nullptr;     // [n_rows] RoPE positions
    const int32_t* seq = nullptr;     // [n_rows] sequence (KV cache slot set) of each row
    int64_t n_out = 0;
    const int32_t* out_rows = nullptr;  // [n_out] indices into the window
    const int32_t* kv_len = nullptr;    // [n_seq] slots a non-causal row attends to
    const int32_t* slot = nullptr;      // [n_rows] cache slot written, -1 none; null: slot = pos
    const int32_t* exclude = nullptr;   // [n_rows] slot not attended, -1 none; null: none
    // [n_rows] nonzero: the row attends to its own K/V (stored in its slot, which lies beyond
    // its sequence's kv_len so that no other row sees it) in place of its excluded key: the
    // mask row of progressive revision sees a mask at its position, not the committed token.
    // Null: none. CPU devices only.
    const int32_t* own_key = nullptr;
    // [n_out] the fused LM head's Gumbel-max draw per output row (null: argmax only).
    const kernels::GumbelRow* gumbel = nullptr;

    int32_t slot_of(int64_t r) const { return slot ? slot[r] : pos[r]; }
    int32_t exclude_of(int64_t r) const { return exclude ? exclude[r] : -1; }
    bool own_key_of(int64_t r) const { return own_key != nullptr && own_key[r] != 0; }
};

// Called after every op with its output (float32 tensors only), for dumps and parity tests.
using OpObserver = std::function<void(int op_index, const Op& op, const TensorDesc& out,
                                      const float* data, int64_t rows)>;

class CompiledPlan {
  public:
    virtual ~CompiledPlan() = default;
    virtual const Plan& plan() const = 0;
    // The plan's output (logits [n_out][n_vocab]) of the last execution.
    virtual const float* output() const = 0;
    virtual size_t arena_bytes() const = 0;
};

// What a device is and how it executes.
struct DeviceCaps {
    std::string name;           // "cpu", "npu-sim"
    std::string profile;        // cost-model profile ("" when times are not projected)
    bool projected = false;     // report() holds projected (cost-model) times
    bool functional = true;     // false: timing only, outputs are placeholders (zeros)
    int64_t tile_rows = 1;      // matmul rows are computed in multiples of this
    size_t window_bytes = 0;    // device-visible address window (0: all host memory)
    std::string memory_policy;  // npu-sim: "baseline" (map on use) or "optimised"
};

// One row of a device's latency table: what a forward of `rows` window rows costs.
struct LatencyEntry {
    int64_t rows = 0;
    int64_t bucket = 0;       // the static shape the rows execute in
    double projected_ms = 0;  // steady-state step latency (compile excluded)
    double npu_ms = 0;        // of which ops on the NPU (flat inside a tile: the staircase)
    double cpu_ms = 0;        // of which ops on the CPU (the output head grows with rows)
    size_t arena_bytes = 0;   // activation memory of the bucket (host float32 layout)
    size_t kv_bytes = 0;      // the KV cache the plan attends to (device fp16 layout)
};

// A buffer the host fills and the device reads: map() makes it addressable by the host,
// unmap() hands it back to the device (on npu-sim both are charged to the projected time).
class DeviceBuffer {
  public:
    virtual ~DeviceBuffer() = default;
    virtual size_t size() const = 0;
    virtual void* map() = 0;
    virtual void unmap() = 0;
    virtual bool mapped() const = 0;
};

class Device {
  public:
    virtual ~Device() = default;
    virtual std::string name() const = 0;
    virtual DeviceCaps caps() const;

    // Compiles a plan recorded for up to plan.max_rows rows. A device with static shapes
    // compiles each shape bucket on its first use (cached), or ahead with compile_bucket().
    virtual std::unique_ptr<CompiledPlan> compile(Plan plan) = 0;
    // The static shape a window of `rows` rows executes in (`rows` itself on a flexible device).
    virtual int64_t bucket_for(int64_t rows) const { return rows; }
    // Compiles the bucket that holds `rows` now instead of at its first execution.
    virtual void compile_bucket(CompiledPlan& compiled, int64_t rows) {}
    virtual void execute(CompiledPlan& compiled, const Batch& batch, KvCache& kv,
                         const OpObserver* observer = nullptr) = 0;

    // Projected steady-state latency of one forward of `plan` for each row count, attending to
    // `kv_len` cached positions, all rows sent through the output head. Empty when the device
    // has no cost model. Decoding policies size their windows with it (docs/step-engine.md).
    virtual std::vector<LatencyEntry> latency_table(const Plan& plan, std::span<const int64_t> rows,
                                                    int64_t kv_len);

    // A device-visible buffer of `bytes` bytes (host memory on the cpu device).
    virtual std::unique_ptr<DeviceBuffer> alloc_buffer(size_t bytes);

    // What the device did since the last reset: ops by placement, projected time by category,
    // the memory runtime's counters. Null when the device keeps no report.
    virtual const DeviceReport* report() const { return nullptr; }
    virtual void reset_report() {}
};

// The CPU device: SIMD kernels split over the thread pool.
std::unique_ptr<Device> make_cpu_device(ThreadPool& pool);

// The CPU device with a projection: every execution is also timed by the cost model of a CPU
// profile (e.g. "sm8750-cpu": the phone CPU the baselines are projected on), reported as
// projected; with timing_only the math is skipped and outputs are zeros.
struct CpuDeviceOptions {
    std::string projection_profile;  // "" = no projection
    std::string profile_overrides;   // "key=value,..." (npu::Profile::apply_overrides)
    bool timing_only = false;
};
std::unique_ptr<Device> make_cpu_device(ThreadPool& pool, const CpuDeviceOptions& options);

}  // namespace llada::runtime
