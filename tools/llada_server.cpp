// llada-server: an OpenAI-compatible HTTP API over the step engine (tools/server_engine.h).
// This file parses the flags, loads the model, builds the handlers' shared state and listens;
// the endpoints are tools/server_routes.cpp (docs/server.md). Diffusion parameters (steps,
// block, policy, threshold, lookahead, revise, ...) are request fields beside the OpenAI ones,
// with the server's flags as defaults; `seed` makes a request reproducible whether it ran alone
// or batched with others.
#include <httplib.h>
#include <sys/socket.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "tokenizer/chat.h"
#include "tools/common.h"
#include "tools/server_engine.h"
#include "tools/server_http.h"
#include "tools/server_routes.h"
#include "util/error.h"

using namespace llada;

namespace {

// SIGINT / SIGTERM drain: from the first signal, generation requests are refused (503) and the
// open answers finish; the server stops when none is left, after --timeout, or at a second
// signal.
void drain_on_signal(const sigset_t& stop_signals, tools::ServerContext& ctx,
                     httplib::Server& srv) {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    ctx.draining = true;
    std::fprintf(stderr, "llada-server: signal %d, draining %d open answers\n", sig,
                 ctx.open_answers->load());
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.timeout_s);
    const timespec tick{0, 50 * 1000 * 1000};
    while (*ctx.open_answers > 0 && std::chrono::steady_clock::now() < until) {
        if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
            std::fprintf(stderr, "llada-server: second signal, stopping now\n");
            break;
        }
    }
    std::fprintf(stderr, "llada-server: stopping (%d open answers)\n", ctx.open_answers->load());
    srv.stop();
}

// Binds host:port (0: any free port) and returns the port. Debian's cpp-httplib is a compiled
// library that listens with a backlog of 5: more clients connecting at once have their
// connections dropped or retried a second later (seen as failed requests and 1 s outliers at 32
// clients). The listening socket is caught as it is created and, once listening, given a
// backlog for every connection thread (Linux takes a second listen() as a new backlog; the
// kernel caps it at somaxconn).
int bind_listener(httplib::Server& srv, const std::string& host, int port, int backlog) {
    int listen_fd = -1;
    srv.set_socket_options([&listen_fd](socket_t sock) {
        httplib::default_socket_options(sock);
        listen_fd = sock;
    });
    int bound = port;
    if (port == 0) {
        bound = srv.bind_to_any_port(host);
    } else if (!srv.bind_to_port(host, port)) {
        throw Error("cannot listen on " + host + ":" + std::to_string(port));
    }
    if (bound < 0) throw Error("cannot listen on " + host);
    if (listen_fd >= 0) ::listen(listen_fd, backlog);
    return bound;
}

}  // namespace

int main(int argc, char** argv) {
    return tools::run_tool([&]() -> int {
        // SIGINT / SIGTERM: blocked before any thread starts (so in every one) and taken by one
        // that stops the server, so in-flight requests finish and the process exits cleanly.
        sigset_t stop_signals;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
        std::string model_path, host = "127.0.0.1";
        int port = 8080, threads = 2, body_kib = 256, max_connections = 256;
        double timeout_s = 600.0;
        std::string api_key, web_dir;
        tools::ServerLimits limits;
        tools::DecodeFlags dec;
        tools::DeviceFlags devf;
        tools::ArgTable args("llada-server",
                             "Serves a diffusion model over an OpenAI-compatible HTTP API; every "
                             "step is one forward over all active requests.");
        args.section("Server");
        tools::add_model_flag(args, &model_path, tools::kDefaultModel);
        args.string({"--host"}, "ADDR", "address to listen on (default 127.0.0.1)", &host);
        args.integer({"--port"}, "N", "port (default 8080; 0: any free port, printed)", &port, 0,
                     65535);
        args.integer({"--parallel"}, "N", "requests decoded together (default 4)", &limits.parallel,
                     1, 1024);
        args.integer({"--queue"}, "N", "requests waiting beyond those (default 16; full: 503)",
                     &limits.queue, 0, 1 << 20);
        args.integer({"--max-gen"}, "N", "largest max_tokens (default 128)", &limits.max_gen, 1,
                     1 << 20);
        args.integer({"--max-prompt"}, "N",
                     "longest prompt in tokens (default: the context minus --max-gen)",
                     &limits.max_prompt, 0, 1 << 20);
        args.integer({"--max-body-kib"}, "N", "largest request body (default 256 KiB)", &body_kib,
                     1, 1 << 20);
        args.integer({"--max-connections"}, "N",
                     "connections served at once, each on its own thread (default 256; more "
                     "are answered 503 and closed)",
                     &max_connections, 1, 1 << 16);
        args.real({"--timeout"}, "S",
                  "a request that has not finished after S seconds is cancelled (default 600)",
                  &timeout_s, 0.001, 1e9);
        args.string({"--web"}, "DIR",
                    "serve the page at / from DIR (default: the source tree's web/; 'none': no "
                    "page)",
                    &web_dir);
        args.string({"--api-key"}, "KEY",
                    "require 'Authorization: Bearer KEY' on /v1/ requests (default: none)",
                    &api_key);
        tools::add_threads_flag(args, &threads, 2);
        dec.policy_default_help =
            "dual-cache with threshold 0.9, or ar for an autoregressive model";
        dec.defaults_for_any_policy = true;
        dec.default_threshold = true;
        dec.add_to(args);
        devf.add_to(args);
        if (!args.parse(argc, argv)) return 0;
        if (model_path.empty()) model_path = tools::find_default_model(argv[0]);
        tools::LoadedModel lm = tools::load_model(model_path);
        if (!args.given("--policy")) dec.policy = "dual-cache";
        dec.finish(args, *lm.model);
        limits.check_slots = dec.opt.revise.tail_dense;
        dec.set_calibration_file(model_path, threads);
        runtime::ThreadPool pool(threads);
        auto device = devf.make(pool);
        limits.kv_f16 = dec.opt.kernels.kv_f16;
        tools::ServerEngine engine(lm, *device, limits);

        tools::ServerContext ctx{.engine = engine,
                                 .lm = lm,
                                 .dec = dec,
                                 .model_name = std::filesystem::path(model_path).stem().string(),
                                 .model_path = model_path,
                                 .api_key = api_key,
                                 .chat_format = {},
                                 .chat_error = {},
                                 .body_kib = body_kib,
                                 .max_connections = max_connections,
                                 .timeout_s = timeout_s};
        try {
            ctx.chat_format = tokenizer::ChatTemplate::from_tokenizer(*lm.tok);
        } catch (const Error& e) {
            ctx.chat_error = e.what();
        }

        httplib::Server srv;
        srv.set_payload_max_length(ctx.max_body());
        // A thread per connection (up to --max-connections): a client that is slow to send its
        // request holds its own thread only, so /health and the others are still answered; the
        // engine's own limits (--parallel, --queue) decide what is decoded or refused with 503.
        // Past that, a connection is answered 503 on one of a few refusal threads
        // (ConnectionThreads::refusing(), the pre-routing handler) and closed.
        srv.new_task_queue = [&ctx] {
            auto* q = new tools::ConnectionThreads(static_cast<size_t>(ctx.max_connections));
            ctx.connections = q;
            return q;
        };
        tools::install_routes(srv, ctx);
        if (web_dir.empty()) web_dir = LLADA_SOURCE_WEB_DIR;
        if (web_dir != "none") {
            if (!std::filesystem::is_regular_file(std::filesystem::path(web_dir) / "index.html"))
                throw Error("--web: no index.html in '" + web_dir +
                            "' (give --web none to serve no page)");
            srv.set_mount_point("/", web_dir);
        }
        const int bound = bind_listener(srv, host, port, max_connections);
        std::fprintf(stderr,
                     "llada-server: %s on http://%s:%d (policy %s, %d parallel; KV cache %.2f MiB, "
                     "%.2f MiB per sequence of %d positions)\n",
                     ctx.model_name.c_str(), host.c_str(), bound, dec.policy.c_str(),
                     limits.parallel, engine.kv_bytes() / 1048576.0,
                     engine.kv_bytes_per_sequence() / 1048576.0, engine.n_pos());
        std::printf("listening %d\n", bound);
        std::fflush(stdout);
        std::thread stopper([&] { drain_on_signal(stop_signals, ctx, srv); });
        srv.listen_after_bind();
        if (stopper.joinable()) {
            pthread_kill(stopper.native_handle(), SIGTERM);  // if the server stopped by itself
            stopper.join();
        }
        return 0;
    });
}
