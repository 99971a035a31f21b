// libFuzzer target: llada-server's request parser (tools/server_request.h) on arbitrary bytes
// taken as a JSON body, for both endpoints. Malformed JSON is the HTTP layer's 400; a parsed body
// must either give options or a llada::Error (the server's 400) - any other exception
// (nlohmann's type errors included) would be a 500 or a crash, so it is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tools/server_request.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace llada;
    const auto body = nlohmann::json::parse(data, data + size, nullptr, false);
    if (body.is_discarded()) return 0;
    tools::ServerLimits limits;
    limits.max_prompt = 512;
    limits.max_gen = 128;
    decode::GenerateOptions defaults;
    defaults.gen = 32;
    defaults.block = 8;
    try {
        const auto p = tools::parse_request(body, "dual-cache", defaults, limits);
        if (p.opt.gen < 1 || p.opt.gen > limits.max_gen || p.opt.block < 1) std::abort();
    } catch (const Error&) {
    }
    try {
        (void)tools::parse_messages(body);
    } catch (const Error&) {
    }
    return 0;
}
