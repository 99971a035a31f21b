// The HTTP side's guards for llada-server over Debian's cpp-httplib (0.11, a compiled library):
// what that version leaves to the application against slow, large or vanishing clients.
//   - ConnectionThreads: a thread per connection up to a cap, so that clients that send their
//     headers a line a second hold only their own threads, never /health's.
//   - read_body: a request body read to a byte limit whatever its framing (cpp-httplib 0.11
//     checks the limit against Content-Length only; a chunked body was read whole).
//   - connection_socket / peer_gone: whether the client of a request still waiting for its
//     answer has gone (cpp-httplib 0.11 says so only when a write fails).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llada::tools {

// cpp-httplib's task queue: each accepted connection is one task that reads its requests,
// answers them and closes. A fixed pool of N threads lets N slow clients take every thread;
// here a task starts on an idle thread or a new one, up to max_threads. A connection past that
// is served on one of a few refusal threads (kRefusalThreads), where refusing() is true: the
// server answers its request with 503 and closes. Only when those are busy too does a
// connection wait for a thread. Serving threads are kept once started (a few hundred idle
// threads cost their stacks' address space); a refusal thread ends with its connection.
class ConnectionThreads : public httplib::TaskQueue {
  public:
    static constexpr size_t kRefusalThreads = 8;
    explicit ConnectionThreads(size_t max_threads);
    ~ConnectionThreads() override;
    void enqueue(std::function<void()> fn) override;
    // Runs what is queued, then joins every thread (cpp-httplib calls it once listening ends).
    void shutdown() override;
    // Connections being served or waiting for a thread (refused ones not counted).
    size_t open() const;
    // Connections past max_threads answered with 503 so far.
    size_t refused() const;
    // True on a refusal thread: the connection being served is one too many.
    static bool refusing();

  private:
    void work();
    void refuse(std::function<void()> fn);

    const size_t max_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    std::vector<std::thread> threads_;
    std::condition_variable refusals_done_;  // refusing_ reached 0
    size_t idle_ = 0, busy_ = 0, refusing_ = 0, refused_ = 0;
    bool stopping_ = false;
};

enum class BodyRead { ok, too_large, failed };

// Reads a request's body into `out`, stopping as soon as it would pass max_bytes (too_large:
// the rest is never read, so the connection must close). failed: the client stopped sending
// or framed the body wrongly.
BodyRead read_body(const httplib::Request& q, const httplib::ContentReader& reader,
                   size_t max_bytes, std::string& out);

// The socket of the connection `q` came on: the one whose local and peer addresses are the
// request's, -1 if none is (it closed). Call it on the request's own thread, which holds that
// socket open until the handler returns.
int connection_socket(const httplib::Request& q);

// Whether the peer of `fd` has closed the connection or reset it (a request pipelined behind
// this one is not a close). A client that half-closes its sending side after the request
// counts as gone: HTTP/1.1 clients do not.
bool peer_gone(int fd);

}  // namespace llada::tools
