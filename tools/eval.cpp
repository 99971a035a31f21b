// What llada-eval needs beyond the tools: task files, answer scoring, confidence intervals.
#include "tools/eval.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tools/checkers.h"
#include "util/error.h"
#include "util/text.h"

namespace llada::tools {
namespace {}  // namespace

std::vector<Problem> read_problems(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw Error("cannot read task file '" + path + "'");
    std::vector<Problem> out;
    std::string line;
    int line_no = 0;
    while (std::getline(f, line)) {
        ++line_no;
        if (trim(line).empty()) continue;
        const std::string where = path + ":" + std::to_string(line_no);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw Error(where + ": not valid JSON (" + e.what() + ")");
        }
        if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string() ||
            !j.contains("answer")) {
            throw Error(where + ": expected an object with a string \"prompt\" and an \"answer\"");
        }
        if (j.contains("task") && !j["task"].is_string())
            throw Error(where + ": \"task\" must be a string, got " + j["task"].dump());
        Problem p;
        p.task = j.contains("task") ? j["task"].get<std::string>() : "default";
        p.prompt = j["prompt"].get<std::string>();
        p.answer = j["answer"].is_string() ? j["answer"].get<std::string>() : j["answer"].dump();
        out.push_back(std::move(p));
    }
    if (out.empty()) throw Error("task file '" + path + "' holds no problems");
    return out;
}

AnswerMatcher::AnswerMatcher(const std::string& regex) {
    if (regex.empty()) return;
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.c_str()), regex.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        throw Error("--answer-regex '" + regex + "' is invalid at offset " + std::to_string(off) +
                    ": " + reinterpret_cast<const char*>(msg));
    }
    code_ = code;
}

AnswerMatcher::~AnswerMatcher() {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::string AnswerMatcher::normalise(std::string s) const {
    s = trim(s);
    if (!code_) return s;
    std::string out;
    for (char c : s) {
        if (c != ',') out += c;
    }
    if (!out.empty() && out.back() == '.') out.pop_back();
    return trim(out);
}

std::optional<std::string> AnswerMatcher::extract(const std::string& generated) const {
    if (!code_) return normalise(generated);
    auto* code = static_cast<pcre2_code*>(code_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    std::optional<std::string> last;
    PCRE2_SIZE start = 0;
    while (start <= generated.size()) {
        // PCRE2_MATCH_INVALID_UTF: text the model generated that is not valid UTF-8 is searched
        // like any other (an invalid sequence matches nothing), not a UTF error that would end
        // the search as "no answer".
        int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(generated.data()), generated.size(),
                             start, 0, md, nullptr);
        if (rc < 0) break;
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const int group = rc >= 2 && ov[2] != PCRE2_UNSET ? 1 : 0;
        last = generated.substr(ov[2 * group], ov[2 * group + 1] - ov[2 * group]);
        start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
    pcre2_match_data_free(md);
    if (!last) return std::nullopt;
    return normalise(*last);
}

bool AnswerMatcher::correct(const std::string& generated, const std::string& expected) const {
    auto got = extract(generated);
    return got && *got == normalise(expected);
}

bool score(const AnswerMatcher& matcher, const Problem& problem, const std::string& generated) {
    if (has_checker(problem.task)) return check_answer(problem.task, problem.prompt, generated);
    return matcher.correct(generated, problem.answer);
}

Interval wilson95(int64_t k, int64_t n) {
    if (n == 0) return {0.0, 1.0};
    const double z = 1.959963984540054;
    const double p = static_cast<double>(k) / n;
    const double denom = 1.0 + z * z / n;
    const double centre = (p + z * z / (2.0 * n)) / denom;
    const double half = z * std::sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom;
    return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

}  // namespace llada::tools
