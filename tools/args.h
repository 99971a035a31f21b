// One declarative argument table per tool: flags, their values and help, parsed with clear errors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llada::tools {

class ArgTable {
  public:
    ArgTable(std::string program, std::string summary);

    // A flag with a value ("-m FILE"); `set` parses the text and throws llada::Error if invalid.
    void value(std::vector<std::string> names, std::string metavar, std::string help,
               std::function<void(const std::string&)> set);
    // Typed conveniences that report the flag name in errors.
    void string(std::vector<std::string> names, std::string metavar, std::string help,
                std::string* out);
    void integer(std::vector<std::string> names, std::string metavar, std::string help, int* out,
                 long long min, long long max);
    void integer(std::vector<std::string> names, std::string metavar, std::string help,
                 uint64_t* out, unsigned long long min, unsigned long long max);
    void real(std::vector<std::string> names, std::string metavar, std::string help, double* out,
              double min, double max);
    // A switch without a value ("--json").
    void flag(std::vector<std::string> names, std::string help, bool* out);
    void section(std::string title);

    // Parses argv; returns false when --help was printed (the caller exits 0). Throws
    // llada::Error for an unknown flag, a missing value or a bad value, naming the flag.
    bool parse(int argc, char** argv);
    std::string help() const;
    // True when the user gave the flag (by any of its names).
    bool given(const std::string& name) const;

  private:
    struct Entry {
        std::vector<std::string> names;
        std::string metavar;  // empty for switches
        std::string help;
        std::function<void(const std::string&)> set;
        bool is_section = false;
        bool given = false;
    };
    Entry* find(const std::string& name);
    std::string program_, summary_;
    std::vector<Entry> entries_;
};

// -m/--model FILE as every tool declares it: `bundled` names the default model (null: the tool
// requires the flag); `what` says what the file is for.
void add_model_flag(ArgTable& args, std::string* path, const char* bundled,
                    const std::string& what = "GGUF model");
// -t/--threads N in [1, 1024], set to its default first: `default_threads` (0: all cores).
void add_threads_flag(ArgTable& args, int* threads, int default_threads = 0);

// Runs a tool's main body, turning llada::Error into "error: ..." on stderr and exit code 1.
int run_tool(const std::function<int()>& body);

}  // namespace llada::tools
