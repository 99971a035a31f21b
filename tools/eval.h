// What llada-eval needs beyond the tools: reading task files, scoring answers, and the
// confidence interval of an accuracy.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace llada::tools {

struct Problem {
    std::string task;
    std::string prompt;
    std::string answer;
};

// Reads a JSONL file of {"task", "prompt", "answer"} objects ("task" optional: "default").
// Throws llada::Error naming the line for malformed input.
std::vector<Problem> read_problems(const std::string& path);

// How a generation is scored against the expected answer.
class AnswerMatcher {
  public:
    // Without a regex: the generated text, with leading and trailing whitespace removed, must
    // equal the expected answer (also trimmed). With a regex (PCRE2 syntax, e.g. "#### (\S+)"):
    // the answer is capture group 1 (or the whole match) of the LAST match in the generated
    // text; both sides are then normalised for numbers: whitespace trimmed, thousands
    // separators (',') removed, a trailing '.' dropped. Throws llada::Error for a bad regex.
    explicit AnswerMatcher(const std::string& regex = "");
    ~AnswerMatcher();
    AnswerMatcher(const AnswerMatcher&) = delete;
    AnswerMatcher& operator=(const AnswerMatcher&) = delete;

    // The answer extracted from a generation (nullopt when the regex does not match).
    std::optional<std::string> extract(const std::string& generated) const;
    bool correct(const std::string& generated, const std::string& expected) const;

  private:
    std::string normalise(std::string s) const;
    void* code_ = nullptr;  // pcre2_code*, kept opaque to keep PCRE2 out of the header
};

// Whether a generation answers a problem: by the task's checker where it has one
// (tools/checkers.h: tasks with many valid answers, whatever --answer-regex says), else by the
// matcher's rule against the problem's answer.
bool score(const AnswerMatcher& matcher, const Problem& problem, const std::string& generated);

// The 95% Wilson score interval of k successes in n trials.
struct Interval {
    double lo, hi;
};
Interval wilson95(int64_t k, int64_t n);

}  // namespace llada::tools
