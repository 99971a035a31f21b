// llada-server's HTTP side (docs/server.md): the endpoints, each a function over the state they
// share (ServerContext). tools/llada_server.cpp parses the flags, builds the context, installs
// these routes and listens.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/chat.h"
#include "tools/common.h"
#include "tools/server_engine.h"
#include "tools/server_http.h"

namespace llada::tools {

// Requests as the HTTP side sees them (the engine counts candidates: best_of runs several per
// request). accepted = completed + failed + cancelled + timed out + in flight; rejected (503)
// and invalid (400 before admission) were never accepted.
struct RequestCounters {
    std::atomic<int64_t> accepted{0}, completed{0}, failed{0}, cancelled{0}, timed_out{0},
        rejected{0}, invalid{0};
};

// What every handler reads (and the counters they keep), built once by llada-server's main.
struct ServerContext {
    ServerEngine& engine;
    const LoadedModel& lm;
    const DecodeFlags& dec;  // the server's default policy and options
    std::string model_name, model_path, api_key;
    // The chat format from the model file, once; chat requests on a model without one get
    // chat_error.
    std::optional<tokenizer::ChatTemplate> chat_format;
    std::string chat_error;
    int body_kib = 256;  // --max-body-kib
    int max_connections = 256;
    double timeout_s = 600.0;
    std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
    // SIGTERM drains: from the first signal, generation requests are refused (503) and the open
    // answers (non-streamed ones being decoded, streams until their [DONE]) finish.
    std::atomic<bool> draining{false};
    std::shared_ptr<std::atomic<int>> open_answers = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<RequestCounters> rc = std::make_shared<RequestCounters>();
    std::atomic<ConnectionThreads*> connections{nullptr};  // the server's task queue
    std::atomic<int64_t> next_id{0};                       // of the answers' ids

    size_t max_body() const { return static_cast<size_t>(body_kib) * 1024; }
};

// Registers every endpoint, the API-key check, the access log and the error answers on `srv`.
void install_routes(httplib::Server& srv, ServerContext& ctx);

}  // namespace llada::tools
