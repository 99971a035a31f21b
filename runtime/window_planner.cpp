// The window layout planner of the swap-optimised runtime and the baseline map-on-use policy.
#include "runtime/window_planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "util/error.h"

namespace llada::runtime {
namespace {

size_t align_up(size_t v, size_t a) {
    return (v + a - 1) / a * a;
}

std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
}

// "blk.12.attn_q" -> "blk.12"; "" when the name is not inside a block.
std::string unit_name(const std::string& tensor) {
    if (tensor.rfind("blk.", 0) != 0) return "";
    const auto dot = tensor.find('.', 4);
    return dot == std::string::npos ? "" : tensor.substr(0, dot);
}

// s of n units, spread evenly with the first after n/s - 1 resident ones: unit
// floor((i + 1) * n / s) - 1 for i < s.
std::vector<int> spread(int n, int s) {
    std::vector<int> v;
    for (int i = 0; i < s; ++i)
        v.push_back(static_cast<int>((static_cast<int64_t>(i) + 1) * n / s) - 1);
    return v;
}

}  // namespace

WeightTable weight_table(const Plan& plan, const PlanProjection& proj, size_t align) {
    WeightTable t;
    const int n_ops = static_cast<int>(plan.ops.size());
    t.op_weight.assign(n_ops, -1);
    std::unordered_map<const uint8_t*, int> by_key;
    std::unordered_map<std::string, int> unit_by_name;
    for (int i = 0; i < n_ops; ++i) {
        const Op& op = plan.ops[i];
        const bool matrix = op.kind == OpKind::MatMul || op.kind == OpKind::LmHeadReduce;
        if (!matrix || proj.where[i] != Placement::Npu) continue;
        auto it = by_key.find(op.weight.data);
        int w;
        if (it != by_key.end()) {
            w = it->second;
        } else {
            w = static_cast<int>(t.weights.size());
            by_key.emplace(op.weight.data, w);
            WeightTable::Weight weight;
            weight.key = op.weight.data;
            weight.bytes = proj.weight_bytes[i];
            weight.name = plan.tensors[op.out].name;
            std::string un = unit_name(weight.name);
            if (un.empty()) un = weight.name;
            auto u = unit_by_name.find(un);
            if (u == unit_by_name.end()) {
                u = unit_by_name.emplace(un, static_cast<int>(t.units.size())).first;
                WeightTable::Unit unit;
                unit.name = un;
                unit.first_op = i;
                t.units.push_back(unit);
            }
            weight.unit = u->second;
            t.units[weight.unit].weights.push_back(w);
            t.units[weight.unit].bytes += align_up(weight.bytes, align);
            t.weights.push_back(weight);
        }
        t.op_weight[i] = w;
        WeightTable::Unit& unit = t.units[t.weights[w].unit];
        unit.first_op = std::min(unit.first_op, i);
        unit.last_op = std::max(unit.last_op, i);
    }
    return t;
}

WindowLayout plan_window(const WeightTable& table, size_t reserved_bytes, size_t window_bytes,
                         int ring_slots) {
    constexpr size_t kAlign = 4096;
    WindowLayout l;
    l.align = kAlign;
    l.window_bytes = window_bytes / kAlign * kAlign;
    l.reserved_bytes = align_up(reserved_bytes, kAlign);
    const int n = static_cast<int>(table.units.size());
    l.unit_slot.assign(n, -1);
    l.stream_index.assign(n, -1);
    l.weight_offset.assign(table.weights.size(), 0);
    if (l.reserved_bytes > l.window_bytes) {
        throw Error("npu-sim: the device window of " + mib(window_bytes) +
                    " cannot hold the KV cache and activations (" + mib(reserved_bytes) +
                    "); use a shorter context or a larger window");
    }
    l.reserved_offset = l.window_bytes - l.reserved_bytes;
    const size_t room = l.reserved_offset;  // for weights
    size_t total = 0, largest = 0;
    for (const auto& u : table.units) {
        total += u.bytes;
        largest = std::max(largest, u.bytes);
    }
    if (largest > room) {
        throw Error("npu-sim: the device window of " + mib(window_bytes) +
                    " cannot hold one layer's weights (" + mib(largest) + ") beside the KV cache " +
                    "and activations (" + mib(reserved_bytes) +
                    "); use a larger window, a smaller model or a shorter context");
    }
    std::vector<char> streamed(n, 0);
    if (total > room) {
        // Ring slots hold the largest unit; as many slots as asked for and as fit (at least
        // one), then as few streamed units as leave room for the rest.
        l.slot_bytes = largest;
        l.n_slots = std::max(1, std::min<int>(ring_slots, static_cast<int>(room / largest)));
        int s = 1;
        for (;; ++s) {
            std::fill(streamed.begin(), streamed.end(), 0);
            for (int u : spread(n, s))
                streamed[u] = 1;
            size_t resident = 0;
            for (int u = 0; u < n; ++u)
                resident += streamed[u] ? 0 : table.units[u].bytes;
            const int slots = std::min(l.n_slots, s);
            if (resident + static_cast<size_t>(slots) * l.slot_bytes <= room) break;
            if (s == n) break;  // unreachable: one slot of the largest unit fits
        }
        l.n_slots = std::min(l.n_slots, s);
    }
    // Resident units from offset 0 in access order, each weight page-aligned in its unit.
    size_t cursor = 0;
    for (int u = 0; u < n; ++u) {
        if (streamed[u]) continue;
        for (int w : table.units[u].weights) {
            l.weight_offset[w] = cursor;
            cursor += align_up(table.weights[w].bytes, kAlign);
            l.resident_bytes += table.weights[w].bytes;
        }
    }
    l.resident_end = cursor;
    l.ring_offset = cursor;
    for (int u = 0; u < n; ++u) {
        if (!streamed[u]) continue;
        const int j = static_cast<int>(l.streamed.size());
        l.streamed.push_back(u);
        l.stream_index[u] = j;
        l.unit_slot[u] = j % l.n_slots;
        size_t off = l.ring_offset + static_cast<size_t>(l.unit_slot[u]) * l.slot_bytes;
        for (int w : table.units[u].weights) {
            l.weight_offset[w] = off;
            off += align_up(table.weights[w].bytes, kAlign);
            l.streamed_bytes += table.weights[w].bytes;
        }
    }
    l.mappings = (l.resident_end > 0 ? 1 : 0) + l.n_slots + (l.reserved_bytes > 0 ? 1 : 0);
    const size_t used = l.resident_end + static_cast<size_t>(l.n_slots) * l.slot_bytes;
    size_t weight_bytes = l.resident_bytes;
    if (!l.streamed.empty()) {
        // A slot holds one unit at a time: count the average streamed unit per slot.
        weight_bytes += l.streamed_bytes * static_cast<size_t>(l.n_slots) / l.streamed.size();
    }
    l.fragmentation = used > 0 ? 1.0 - static_cast<double>(weight_bytes) / used : 0.0;
    return l;
}

std::string check_window_layout(const WindowLayout& l, const WeightTable& table) {
    const size_t ring_end = l.ring_offset + static_cast<size_t>(l.n_slots) * l.slot_bytes;
    if (l.resident_end > l.ring_offset) return "the resident region overlaps the ring";
    if (ring_end > l.reserved_offset) return "the ring overlaps the reserve";
    if (l.reserved_offset + l.reserved_bytes > l.window_bytes)
        return "the reserve leaves the window";
    // Every weight inside its region, and weights of one region disjoint.
    struct Range {
        size_t lo, hi;
        int region;  // -1 resident, else slot
        int unit;
    };
    std::vector<Range> ranges;
    for (size_t w = 0; w < table.weights.size(); ++w) {
        const int u = table.weights[w].unit;
        const size_t lo = l.weight_offset[w], hi = lo + table.weights[w].bytes;
        const int slot = l.unit_slot[u];
        if (slot < 0) {
            if (hi > l.resident_end)
                return "weight " + table.weights[w].name + " leaves the resident region";
        } else {
            const size_t s0 = l.ring_offset + static_cast<size_t>(slot) * l.slot_bytes;
            if (lo < s0 || hi > s0 + l.slot_bytes) {
                return "weight " + table.weights[w].name + " leaves its ring slot";
            }
        }
        ranges.push_back({lo, hi, slot, u});
    }
    for (size_t a = 0; a < ranges.size(); ++a) {
        for (size_t b = a + 1; b < ranges.size(); ++b) {
            const Range& x = ranges[a];
            const Range& y = ranges[b];
            if (!(x.lo < y.hi && y.lo < x.hi)) continue;
            // Sharing bytes is allowed only for different units taking turns in one slot.
            if (x.region < 0 || y.region < 0 || x.region != y.region || x.unit == y.unit) {
                return "weights " + table.weights[a].name + " and " + table.weights[b].name +
                       " overlap while both are live";
            }
        }
    }
    // Units taking turns in a slot must never be live at once: in access order, each one's
    // last op comes before the next occupant's first op.
    for (int slot = 0; slot < l.n_slots; ++slot) {
        int prev = -1;
        for (int u : l.streamed) {
            if (l.unit_slot[u] != slot) continue;
            if (prev >= 0 && table.units[prev].last_op >= table.units[u].first_op) {
                return "units " + table.units[prev].name + " and " + table.units[u].name +
                       " share a slot while both are live";
            }
            prev = u;
        }
    }
    size_t resident = 0, all = 0;
    for (size_t w = 0; w < table.weights.size(); ++w) {
        all += table.weights[w].bytes;
        resident += l.unit_slot[table.weights[w].unit] < 0 ? table.weights[w].bytes : 0;
    }
    if (resident != l.resident_bytes || all != l.resident_bytes + l.streamed_bytes) {
        return "resident + streamed bytes do not add up to the weights";
    }
    return "";
}

MapOnUse::MapOnUse(size_t capacity, size_t align) : window_(capacity, align) {}

MapOnUse::Step MapOnUse::touch(int weight, size_t bytes) {
    Step s;
    ++tick_;
    auto it = mapped_.find(weight);
    if (it != mapped_.end()) {
        it->second.last_use = tick_;
        s.hit = true;
        s.offset = it->second.offset;
        return s;
    }
    if (window_.aligned(bytes) > window_.capacity()) {
        throw Error("npu-sim: a weight of " + mib(bytes) + " does not fit the device window (" +
                    mib(window_.capacity()) + " beside the KV cache and activations)");
    }
    for (;;) {
        s.fragmentation = window_.fragmentation();
        if (auto off = window_.map(bytes)) {
            s.offset = *off;
            break;
        }
        // Evict the least recently used mapping (ties cannot happen: ticks are unique).
        int victim = -1;
        int64_t oldest = std::numeric_limits<int64_t>::max();
        for (const auto& [w, e] : mapped_) {
            if (e.last_use < oldest) {
                oldest = e.last_use;
                victim = w;
            }
        }
        const Entry e = mapped_.at(victim);
        window_.unmap(e.offset);
        mapped_.erase(victim);
        s.unmaps += 1;
        s.unmapped_bytes += e.bytes;
    }
    mapped_.emplace(weight, Entry{s.offset, bytes, tick_});
    return s;
}

}  // namespace llada::runtime
