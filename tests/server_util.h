// Helpers of the server's tests: a llada-server process on a free port, and clients whose
// timeouts are the test's own limit.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace llada::test {

inline std::string test_model() {
    return (std::filesystem::path(LLADA_SOURCE_DIR) / "models" / "tiny-llada-m.gguf").string();
}

// A client of a test server. Its timeouts are the test's own time limit (ctest's 300 s, less a
// margin), not cpp-httplib's 5 s default: a request's time depends on the host and on a
// sanitizer's slowdown, and a test must fail on what the server answers, never on how fast.
constexpr time_t kClientLimitSeconds = 280;
inline httplib::Client client(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(kClientLimitSeconds);
    c.set_read_timeout(kClientLimitSeconds);
    c.set_write_timeout(kClientLimitSeconds);
    return c;
}

// A server process on a free port, stopped at the end.
struct Server {
    pid_t pid = -1;
    int port = 0;
    // stderr_file: where the server's standard error (its access log) goes, when given.
    explicit Server(const std::vector<std::string>& extra,
                    const std::string& model_path = test_model(),
                    const std::string& stderr_file = "") {
        int fd[2];
        if (pipe(fd) != 0) return;
        pid = fork();
        if (pid == 0) {
            dup2(fd[1], 1);
            close(fd[0]);
            if (!stderr_file.empty()) {
                if (FILE* e = std::fopen(stderr_file.c_str(), "w")) dup2(fileno(e), 2);
            }
            std::vector<std::string> a = {
                (std::filesystem::path(LLADA_BIN_DIR) / "llada-server").string(),
                "-m",
                model_path,
                "--port",
                "0",
                "-t",
                "1"};
            // The tests' defaults, unless `extra` gives its own.
            for (const char* flag : {"--max-gen", "--block"}) {
                if (std::find(extra.begin(), extra.end(), flag) == extra.end()) {
                    a.push_back(flag);
                    a.push_back(flag == std::string("--block") ? "8" : "32");
                }
            }
            a.insert(a.end(), extra.begin(), extra.end());
            std::vector<char*> argv;
            for (auto& s : a)
                argv.push_back(s.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(fd[1]);
        FILE* f = fdopen(fd[0], "r");
        char line[128] = {0};
        if (f && std::fgets(line, sizeof(line), f)) std::sscanf(line, "listening %d", &port);
        if (f) fclose(f);
    }
    // SIGTERM; the exit status (0: a clean exit).
    int stop() {
        int status = -1;
        if (pid > 0) {
            kill(pid, SIGTERM);
            waitpid(pid, &status, 0);
            pid = -1;
        }
        return status;
    }
    // Waits for the process to exit by itself (after a signal the test sent); its status.
    int wait_exit() {
        int status = -1;
        if (pid > 0) {
            waitpid(pid, &status, 0);
            pid = -1;
        }
        return status;
    }
    ~Server() { stop(); }
};

// A raw TCP connection to the test server, for what cpp-httplib's client will not send
// (chunked bodies, headers a line at a time, a socket closed mid-request).
struct RawConnection {
    int fd = -1;
    explicit RawConnection(int port) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
            close(fd);
            fd = -1;
        }
    }
    RawConnection(const RawConnection&) = delete;
    RawConnection& operator=(const RawConnection&) = delete;
    // False once the server has closed its end (or reset it).
    bool send_all(const std::string& bytes) {
        for (size_t at = 0; at < bytes.size();) {
            const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
            if (n <= 0) return false;
            at += static_cast<size_t>(n);
        }
        return true;
    }
    // Everything the server sends until it closes the connection.
    std::string read_all() {
        std::string out;
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
            out.append(buf, static_cast<size_t>(n));
        return out;
    }
    // One answer with a Content-Length body (the connection may stay open after it), or what
    // came before the server closed.
    std::string read_response() {
        std::string out;
        char buf[4096];
        for (;;) {
            const size_t head = out.find("\r\n\r\n");
            if (head != std::string::npos) {
                const size_t at = out.find("Content-Length: ");
                if (at != std::string::npos && at < head) {
                    const size_t want = head + 4 + std::stoul(out.substr(at + 16));
                    if (out.size() >= want) return out;
                }
            }
            const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
            if (n <= 0) return out;
            out.append(buf, static_cast<size_t>(n));
        }
    }
    void hang_up() {
        if (fd >= 0) close(fd);
        fd = -1;
    }
    ~RawConnection() { hang_up(); }
};

}  // namespace llada::test
