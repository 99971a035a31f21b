// Text form of a device report.
#include "runtime/device_report.h"

#include <cstdio>

namespace llada::runtime {

std::string DeviceReport::summary() const {
    std::string s;
    char buf[512];
    auto line = [&](const char* fmt, auto... args) {
        std::snprintf(buf, sizeof(buf), fmt, args...);
        s += buf;
        s += '\n';
    };
    line("device %s%s%s, %lld executions, host %.3f s%s", device.c_str(),
         profile.empty() ? "" : ", profile ", profile.c_str(), static_cast<long long>(executions),
         host_s, functional ? "" : " (timing only: outputs are placeholders)");
    if (!projected) return s;
    line("  projected %.1f ms (one-time compile/load %.1f ms): NPU ops %.1f ms, CPU ops %.1f ms",
         projected_ms(), one_time_us / 1e3, npu_us / 1e3, cpu_us / 1e3);
    std::string cats;
    for (int c = 0; c < npu::kCategories; ++c) {
        std::snprintf(buf, sizeof(buf), "%s%s %.1f", cats.empty() ? "" : ", ",
                      npu::category_name(static_cast<npu::Category>(c)), projected_us.us[c] / 1e3);
        cats += buf;
    }
    line("  projected ms by category: %s", cats.c_str());
    line(
        "  ops on NPU %lld, on CPU %lld; rows %lld computed as %lld (tile padding); %lld shape "
        "buckets compiled",
        static_cast<long long>(ops_npu), static_cast<long long>(ops_cpu),
        static_cast<long long>(rows), static_cast<long long>(padded_rows),
        static_cast<long long>(buckets_compiled));
    if (!memory_policy.empty()) {
        line(
            "  memory %s: window %.2f GiB (peak %.2f), %lld maps / %lld unmaps, %.2f GB mapped, "
            "%.2f GB copied, stall %.1f ms (projected), fragmentation %.3f",
            memory_policy.c_str(), window_bytes / double(1 << 30), window_peak / double(1 << 30),
            static_cast<long long>(mappings), static_cast<long long>(unmappings),
            bytes_mapped / 1e9, bytes_copied / 1e9, stall_us() / 1e3, fragmentation);
        if (ring_slots > 0 || resident_bytes > 0) {
            line(
                "  resident %.2f GB, streamed %.2f GB per forward through %d ring slots, "
                "prefetch busy %.1f ms (projected, overlapped)",
                resident_bytes / 1e9, streamed_bytes / 1e9, ring_slots, prefetch_us / 1e3);
        }
        line("  host: %.2f GB of tile copies of the weights (0: the file is in tile formats)",
             host_tile_copy_bytes / 1e9);
        if (!weight_conversion.empty())
            line("  weights read as: %s (converted once at load)", weight_conversion.c_str());
    }
    return s;
}

}  // namespace llada::runtime
