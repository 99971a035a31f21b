// A bounded load generator for llada-server on loopback (C++, so the client does not starve
// the server of the machine's cores the way an interpreted one does): for each concurrency C,
// C threads send N non-streaming completions in total (prompts from a task file, seed = the
// request's index) and it prints failed requests, p50/p99 latency, requests and answer tokens
// (usage.completion_tokens) per second. Every level sends the same requests, so the ratio of
// requests per second is the throughput ratio. Stops by itself.
//
//     server_load PORT TASKS.jsonl C[,C...] N
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using json = nlohmann::json;

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: server_load PORT TASKS.jsonl C[,C...] N\n");
        return 2;
    }
    const int port = std::atoi(argv[1]);
    std::vector<std::string> prompts;
    std::ifstream f(argv[2]);
    for (std::string line; std::getline(f, line);)
        prompts.push_back(json::parse(line)["prompt"]);
    if (prompts.empty()) {
        std::fprintf(stderr, "server_load: no prompts in %s\n", argv[2]);
        return 2;
    }
    std::vector<int> levels;
    std::stringstream ss(argv[3]);
    for (std::string c; std::getline(ss, c, ',');)
        levels.push_back(std::atoi(c.c_str()));
    const int n = std::atoi(argv[4]);
    std::printf(
        "| concurrent clients | requests | failed | p50 ms | p99 ms | requests/s | answer tokens/s "
        "| "
        "wall s | engine steps |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double base = 0;
    for (int c : levels) {
        std::atomic<int> next{0}, failed{0};
        std::atomic<long long> tokens{0};
        std::mutex mu;
        std::vector<double> lat;
        auto metric = [&](const char* name) {
            httplib::Client m("127.0.0.1", port);
            auto r = m.Get("/metrics");
            if (!r) return 0.0;
            // Appended, not concatenated: g++ 12 warns (-Wrestrict, a false positive) on the
            // temporary of "\n" + std::string(name).
            std::string key = "\n";
            key.append(name).push_back(' ');
            const auto at = r->body.find(key);
            return at == std::string::npos ? 0.0 : std::atof(r->body.c_str() + at + key.size());
        };
        const double steps0 = metric("llada_steps_total");
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (int t = 0; t < c; ++t) {
            ts.emplace_back([&] {
                httplib::Client cl("127.0.0.1", port);
                cl.set_read_timeout(120, 0);
                for (int i; (i = next.fetch_add(1)) < n;) {
                    const json body = {
                        {"prompt", prompts[i % prompts.size()]}, {"max_tokens", 32}, {"seed", i}};
                    const auto a = std::chrono::steady_clock::now();
                    auto r = cl.Post("/v1/completions", body.dump(), "application/json");
                    const double ms = std::chrono::duration<double, std::milli>(
                                          std::chrono::steady_clock::now() - a)
                                          .count();
                    if (!r || r->status != 200) {
                        if (failed.load() < 3) {
                            std::fprintf(stderr, "server_load: request %d failed: %s\n", i,
                                         r ? (std::to_string(r->status) + " " + r->body).c_str()
                                           : httplib::to_string(r.error()).c_str());
                        }
                        ++failed;
                        continue;
                    }
                    tokens += json::parse(r->body)["usage"]["completion_tokens"].get<long long>();
                    std::lock_guard<std::mutex> lock(mu);
                    lat.push_back(ms);
                }
            });
        }
        for (auto& t : ts)
            t.join();
        const double wall =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double steps = metric("llada_steps_total") - steps0;
        std::sort(lat.begin(), lat.end());
        const double p50 = lat.empty() ? 0 : lat[lat.size() / 2];
        const double p99 = lat.empty() ? 0 : lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
        const double rps = (n - failed.load()) / wall;
        if (c == 1) base = rps;
        std::printf("| %d | %d | %d | %.1f | %.1f | %.2f | %.0f | %.2f | %.0f |\n", c, n,
                    failed.load(), p50, p99, rps, tokens / wall, wall, steps);
        if (c == 8 && base > 0)
            std::printf(
                "\nthroughput (requests/s) at 8 concurrent clients / one at a time: %.2fx\n\n",
                rps / base);
    }
    return 0;
}
