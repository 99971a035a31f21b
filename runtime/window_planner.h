// The swap-optimised memory runtime's planner: which weights live in the NPU's address window
// and where. From the plan's access order it groups the NPU's weights into units (one per layer),
// keeps as many units resident as fit beside the KV cache and activations, and streams the rest
// through a ring of slots, spread over the forward so each streamed unit's copy overlaps the
// compute of the resident units before it. The baseline policy (map each tensor on use, unmap the
// least recently used when the window is full) is simulated here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "npu/address_window.h"
#include "runtime/plan.h"
#include "runtime/projection.h"

namespace llada::runtime {

// The NPU's weights of a plan in access order, grouped into streaming units.
struct WeightTable {
    struct Weight {
        const uint8_t* key = nullptr;  // the model weight's data (identity across plans)
        size_t bytes = 0;              // in the NPU's tile format
        std::string name;              // the op output that reads it ("blk.3.attn_q")
        int unit = -1;
    };
    struct Unit {
        std::string name;          // "blk.3", or the tensor name for weights outside blocks
        std::vector<int> weights;  // in access order
        size_t bytes = 0;          // sum of the weights' page-aligned sizes
        int first_op = 0, last_op = 0;
    };
    std::vector<Weight> weights;
    std::vector<Unit> units;
    std::vector<int> op_weight;  // per op: weight index, -1 when the op reads no NPU weight
};

// Units are the "blk.N." prefixes of the reading ops' outputs (one per layer); a weight outside
// any block is a unit of its own. `align` is the window's mapping granularity.
WeightTable weight_table(const Plan& plan, const PlanProjection& proj, size_t align);

// Placement in the window [0, window_bytes):
//   [0, resident_end)                              resident units, in access order
//   [ring_offset, ring_offset + n_slots*slot_bytes) ring slots for streamed units
//   [reserved_offset, window end)                  KV cache, activations, tables
struct WindowLayout {
    size_t window_bytes = 0, align = 0;
    size_t resident_end = 0;
    size_t ring_offset = 0, slot_bytes = 0;
    int n_slots = 0;
    size_t reserved_offset = 0, reserved_bytes = 0;
    std::vector<int> unit_slot;         // per unit: -1 resident, else its ring slot
    std::vector<size_t> weight_offset;  // per weight: offset in the window
    std::vector<int> streamed;          // streamed units in access order
    std::vector<int> stream_index;      // per unit: index into `streamed`, -1 if resident
    int64_t mappings = 0;               // large mappings: resident region + slots + reserve
    size_t resident_bytes = 0;          // weights kept resident
    size_t streamed_bytes = 0;          // weights streamed per forward
    double fragmentation = 0;           // share of the used window holding no weight
};

// Plans the layout; throws llada::Error when the window cannot hold the reserve and the largest
// unit. `ring_slots` >= 1 (2 = double buffering). Deterministic.
WindowLayout plan_window(const WeightTable& table, size_t reserved_bytes, size_t window_bytes,
                         int ring_slots);

// "" when the layout is sound: every region inside the window, resident units, ring slots and
// the reserve pairwise disjoint, every weight inside its unit's region, and units sharing a slot
// never live at the same time. Otherwise what is wrong.
std::string check_window_layout(const WindowLayout& layout, const WeightTable& table);

// The baseline policy, simulated: each weight is mapped on use (first fit) and the least
// recently used weights are unmapped while the window has no hole large enough.
class MapOnUse {
  public:
    MapOnUse(size_t capacity, size_t align);
    struct Step {
        bool hit = false;
        size_t offset = 0;   // where the weight is mapped
        int64_t unmaps = 0;  // evictions this step
        size_t unmapped_bytes = 0;
        double fragmentation = 0;  // of the free space when the map was placed
    };
    // Throws llada::Error when the weight is larger than the whole window.
    Step touch(int weight, size_t bytes);
    const npu::AddressWindow& window() const { return window_; }
    size_t capacity() const { return window_.capacity(); }

  private:
    npu::AddressWindow window_;
    struct Entry {
        size_t offset, bytes;
        int64_t last_use;
    };
    std::unordered_map<int, Entry> mapped_;
    int64_t tick_ = 0;
};

}  // namespace llada::runtime
