// One declarative argument table per tool: flags, their values and help, parsed with clear errors.
#pragma once

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

// Runs a tool's main body, turning llada::Error into "error: ..." on stderr and exit code 1.
int run_tool(const std::function<int()>& body);

}  // namespace llada::tools
