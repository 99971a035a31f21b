// One declarative argument table per tool: flags, their values and help, parsed with clear errors.
#include "tools/args.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <thread>

#include "util/error.h"

namespace llada::tools {

ArgTable::ArgTable(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void ArgTable::value(std::vector<std::string> names, std::string metavar, std::string help,
                     std::function<void(const std::string&)> set) {
    entries_.push_back({std::move(names), std::move(metavar), std::move(help), std::move(set)});
}

void ArgTable::string(std::vector<std::string> names, std::string metavar, std::string help,
                      std::string* out) {
    value(std::move(names), std::move(metavar), std::move(help),
          [out](const std::string& v) { *out = v; });
}

void ArgTable::integer(std::vector<std::string> names, std::string metavar, std::string help,
                       int* out, long long min, long long max) {
    std::string flag = names.front();
    value(std::move(names), std::move(metavar), std::move(help),
          [out, flag, min, max](const std::string& v) {
              char* end = nullptr;
              errno = 0;
              long long x = std::strtoll(v.c_str(), &end, 10);
              if (v.empty() || *end != '\0' || errno != 0) {
                  throw Error(flag + " expects an integer, got '" + v + "'");
              }
              if (x < min || x > max) {
                  throw Error(flag + " = " + v + " is out of range [" + std::to_string(min) + ", " +
                              std::to_string(max) + "]");
              }
              *out = static_cast<int>(x);
          });
}

void ArgTable::integer(std::vector<std::string> names, std::string metavar, std::string help,
                       uint64_t* out, unsigned long long min, unsigned long long max) {
    std::string flag = names.front();
    value(std::move(names), std::move(metavar), std::move(help),
          [out, flag, min, max](const std::string& v) {
              char* end = nullptr;
              errno = 0;
              const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
              if (v.empty() || v[0] == '-' || *end != '\0' || errno != 0) {
                  throw Error(flag + " expects an integer, got '" + v + "'");
              }
              if (x < min || x > max) {
                  throw Error(flag + " = " + v + " is out of range [" + std::to_string(min) + ", " +
                              std::to_string(max) + "]");
              }
              *out = x;
          });
}

void ArgTable::real(std::vector<std::string> names, std::string metavar, std::string help,
                    double* out, double min, double max) {
    std::string flag = names.front();
    value(std::move(names), std::move(metavar), std::move(help),
          [out, flag, min, max](const std::string& v) {
              char* end = nullptr;
              errno = 0;
              double x = std::strtod(v.c_str(), &end);
              if (v.empty() || *end != '\0' || errno != 0 || x != x) {
                  throw Error(flag + " expects a number, got '" + v + "'");
              }
              if (x < min || x > max) {
                  std::ostringstream os;
                  os << flag << " = " << v << " is out of range [" << min << ", " << max << "]";
                  throw Error(os.str());
              }
              *out = x;
          });
}

void ArgTable::flag(std::vector<std::string> names, std::string help, bool* out) {
    entries_.push_back(
        {std::move(names), "", std::move(help), [out](const std::string&) { *out = true; }});
}

void ArgTable::section(std::string title) {
    Entry e;
    e.help = std::move(title);
    e.is_section = true;
    entries_.push_back(std::move(e));
}

ArgTable::Entry* ArgTable::find(const std::string& name) {
    for (auto& e : entries_) {
        for (const auto& n : e.names) {
            if (n == name) return &e;
        }
    }
    return nullptr;
}

bool ArgTable::given(const std::string& name) const {
    for (const auto& e : entries_) {
        for (const auto& n : e.names) {
            if (n == name) return e.given;
        }
    }
    return false;
}

bool ArgTable::parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(help().c_str(), stdout);
            return false;
        }
        std::string val;
        bool has_inline = false;
        if (arg.rfind("--", 0) == 0) {
            auto eq = arg.find('=');
            if (eq != std::string::npos) {
                val = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_inline = true;
            }
        }
        Entry* e = find(arg);
        if (!e) throw Error("unknown option '" + arg + "' (see --help)");
        // The second value would silently replace the first.
        if (e->given) throw Error("option " + arg + " is given twice");
        e->given = true;
        if (e->metavar.empty()) {
            if (has_inline) throw Error("option " + arg + " takes no value");
            e->set("");
            continue;
        }
        if (!has_inline) {
            if (i + 1 >= argc) throw Error("option " + arg + " needs a value (" + e->metavar + ")");
            val = argv[++i];
        }
        e->set(val);
    }
    return true;
}

std::string ArgTable::help() const {
    std::ostringstream os;
    os << "usage: " << program_ << " [options]\n\n" << summary_ << "\n";
    for (const auto& e : entries_) {
        if (e.is_section) {
            os << "\n" << e.help << ":\n";
            continue;
        }
        std::string lhs;
        for (const auto& n : e.names)
            lhs += (lhs.empty() ? "" : ", ") + n;
        if (!e.metavar.empty()) lhs += " " + e.metavar;
        os << "  " << lhs;
        if (lhs.size() < 28) {
            os << std::string(28 - lhs.size(), ' ');
        } else {
            os << "\n" << std::string(30, ' ');
        }
        // Indent continuation lines of the help text.
        for (char c : e.help) {
            os << c;
            if (c == '\n') os << std::string(30, ' ');
        }
        os << "\n";
    }
    return os.str();
}

void add_model_flag(ArgTable& args, std::string* path, const char* bundled,
                    const std::string& what) {
    args.string({"-m", "--model"}, "FILE",
                bundled != nullptr ? what + " (default: the bundled " + bundled + ")"
                                   : what + " (required)",
                path);
}

void add_threads_flag(ArgTable& args, int* threads, int default_threads) {
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    *threads = default_threads > 0 ? default_threads : all;
    std::string help = "CPU threads (default: all cores)";
    if (default_threads > 0) help = "CPU threads (default " + std::to_string(default_threads) + ")";
    args.integer({"-t", "--threads"}, "N", help, threads, 1, 1024);
}

int run_tool(const std::function<int()>& body) {
    try {
        return body();
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

}  // namespace llada::tools
