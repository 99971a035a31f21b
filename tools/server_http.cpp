#include "tools/server_http.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace llada::tools {

ConnectionThreads::ConnectionThreads(size_t max_threads)
    : max_(max_threads < 1 ? 1 : max_threads) {}

ConnectionThreads::~ConnectionThreads() {
    shutdown();
}

namespace {
thread_local bool tl_refusing = false;  // this thread serves a connection past the cap
}  // namespace

bool ConnectionThreads::refusing() {
    return tl_refusing;
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    // Every serving thread busy and none to add: the connection is one too many. It is
    // answered 503 on a refusal thread while one is free, else it waits like any other.
    if (tasks_.size() >= idle_ && threads_.size() >= max_ && refusing_ < kRefusalThreads &&
        !stopping_) {
        refuse(std::move(fn));
        return;
    }
    tasks_.push_back(std::move(fn));
    // More tasks waiting than idle threads to take them: one more thread, within the cap.
    if (tasks_.size() > idle_ && threads_.size() < max_) {
        threads_.emplace_back([this] { work(); });
    } else {
        cv_.notify_one();
    }
}

void ConnectionThreads::refuse(std::function<void()> fn) {
    // (Called with mu_ held.) A detached thread that lives one connection, the refusal closing
    // it; shutdown() waits for every one to end.
    ++refusing_;
    ++refused_;
    std::thread([this, fn = std::move(fn)]() mutable {
        tl_refusing = true;
        fn();
        std::function<void()>().swap(fn);  // nothing of the connection outlives the count
        std::lock_guard<std::mutex> lock(mu_);
        if (--refusing_ == 0) refusals_done_.notify_all();
    }).detach();
}

void ConnectionThreads::work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        ++idle_;
        cv_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
        --idle_;
        if (tasks_.empty()) return;  // stopping, nothing left
        std::function<void()> fn = std::move(tasks_.front());
        tasks_.pop_front();
        ++busy_;
        lock.unlock();
        fn();
        lock.lock();
        --busy_;
    }
}

void ConnectionThreads::shutdown() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
        threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads)
        t.join();
    std::unique_lock<std::mutex> lock(mu_);
    refusals_done_.wait(lock, [&] { return refusing_ == 0; });
}

size_t ConnectionThreads::refused() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
}

size_t ConnectionThreads::open() const {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_ + tasks_.size();
}

BodyRead read_body(const httplib::Request& q, const httplib::ContentReader& reader,
                   size_t max_bytes, std::string& out) {
    bool over = false;
    const bool ok = reader([&](const char* data, size_t n) {
        if (out.size() + n > max_bytes) {
            over = true;
            return false;
        }
        out.append(data, n);
        return true;
    });
    if (over) return BodyRead::too_large;
    if (ok) return BodyRead::ok;
    // cpp-httplib refuses a declared Content-Length over its own limit (set to the same
    // max_bytes) before reading a byte.
    const std::string declared = q.get_header_value("Content-Length");
    if (!declared.empty() && std::strtoull(declared.c_str(), nullptr, 10) > max_bytes)
        return BodyRead::too_large;
    return BodyRead::failed;
}

namespace {

// A socket address as cpp-httplib writes it into a request (numeric host, port).
bool address_of(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
    char h[NI_MAXHOST], s[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof(h), s, sizeof(s),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    host = h;
    port = std::atoi(s);
    return true;
}

}  // namespace

int connection_socket(const httplib::Request& q) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        char* end = nullptr;
        const std::string name = entry.path().filename().string();
        const long fd = std::strtol(name.c_str(), &end, 10);
        if (end == name.c_str() || *end != '\0') continue;
        struct stat st {};
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage local{}, peer{};
        socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) !=
                0 ||
            getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
            continue;
        std::string lh, ph;
        int lp = -1, pp = -1;
        if (!address_of(local, local_len, lh, lp) || !address_of(peer, peer_len, ph, pp)) continue;
        if (lp == q.local_port && pp == q.remote_port && lh == q.local_addr && ph == q.remote_addr)
            return static_cast<int>(fd);
    }
    return -1;
}

bool peer_gone(int fd) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // bytes of a next request
    if (n == 0) return true;  // the peer closed its end
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace llada::tools
