// The `real` suite's checkers (tools/checkers.h); train/tasks_real.py describes the tasks.
#include "tools/checkers.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <vector>

#include "util/error.h"
#include "util/text.h"

namespace llada::tools {
namespace {

std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t next; (next = s.find(sep, at)) != std::string::npos; at = next + sep.size())
        out.push_back(s.substr(at, next - at));
    out.push_back(s.substr(at));
    return out;
}

bool starts_with(const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// rwalk: "walk c; a:bdf b:ace ... h:abf;" and a walk of 72 nodes along the listed edges.
constexpr const char* kNodes = "abcdefgh";
constexpr int kDegree = 3, kWalkN = 72;

bool check_rwalk(const std::string& prompt, const std::string& text) {
    if (!starts_with(prompt, "walk ") || !ends_with(prompt, ";")) return false;
    const auto parts = split(prompt.substr(5, prompt.size() - 6), " ");
    if (parts.size() != 9 || parts[0].size() != 2 || parts[0][1] != ';') return false;
    std::map<char, std::string> adj;
    for (size_t i = 1; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        if (p.size() != 2 + kDegree || p[1] != ':') return false;
        adj[p[0]] = p.substr(2);
    }
    std::string keys;
    for (const auto& [k, v] : adj)
        keys += k;
    if (keys != kNodes) return false;
    if (static_cast<int>(text.size()) != kWalkN || text[0] != parts[0][0]) return false;
    for (size_t i = 1; i < text.size(); ++i) {
        const auto it = adj.find(text[i - 1]);
        if (it == adj.end() || it->second.find(text[i]) == std::string::npos) return false;
    }
    return true;
}

// rpick: "pick N of a18 c58 ... z73:" (20 items, a letter and two digits each) and N distinct
// items of the list, in any order.
constexpr size_t kPickItems = 20;

bool item(const std::string& w) {
    return w.size() == 3 && w[0] >= 'a' && w[0] <= 'z' && std::isdigit(uint8_t(w[1])) &&
           std::isdigit(uint8_t(w[2]));
}

bool check_rpick(const std::string& prompt, const std::string& text) {
    const auto w = split(prompt, " ");
    if (w.size() != 3 + kPickItems || w[0] != "pick" || w[2] != "of" || !ends_with(w.back(), ":"))
        return false;
    if (w[1].empty() || w[1].size() > 3 || !std::all_of(w[1].begin(), w[1].end(), ::isdigit))
        return false;
    const size_t n = std::stoul(w[1]);
    std::vector<std::string> items(w.begin() + 3, w.end());
    items.back().pop_back();  // the ':'
    if (!std::all_of(items.begin(), items.end(), item)) return false;
    auto picks = split(text, " ");
    if (picks.size() != n) return false;
    for (const auto& p : picks)
        if (std::find(items.begin(), items.end(), p) == items.end()) return false;
    std::sort(picks.begin(), picks.end());
    return std::adjacent_find(picks.begin(), picks.end()) == picks.end();
}

// rsent: five sentences "the <subject> <verb> <article> <object>." with agreement, each subject
// the previous sentence's object (the first the prompt's), using only the prompt's four nouns
// and four verbs: "story of the dogs; ant cat cow dog; fear like love mind:".
constexpr std::array<const char*, 8> kNouns = {"ant", "ape", "bat", "bee",
                                               "cat", "cow", "dog", "doe"};
constexpr std::array<const char*, 8> kVerbs = {"fear", "find", "help", "hold",
                                               "like", "love", "meet", "mind"};
constexpr int kSentences = 5;
constexpr size_t kCast = 4;

bool in(const std::vector<std::string>& words, const std::string& w) {
    return std::find(words.begin(), words.end(), w) != words.end();
}
template <size_t N>
bool in(const std::array<const char*, N>& words, const std::string& w) {
    return std::find_if(words.begin(), words.end(), [&](const char* x) { return w == x; }) !=
           words.end();
}

struct Noun {
    std::string noun;
    bool plural = false;
    bool operator==(const Noun&) const = default;
};
std::optional<Noun> parse_noun(const std::string& w, const std::vector<std::string>& nouns) {
    if (in(nouns, w)) return Noun{w, false};
    if (ends_with(w, "s") && in(nouns, w.substr(0, w.size() - 1)))
        return Noun{w.substr(0, w.size() - 1), true};
    return {};
}

bool check_rsent(const std::string& prompt, const std::string& text) {
    const std::string head = "story of the ";
    if (!starts_with(prompt, head) || !ends_with(prompt, ":")) return false;
    const auto parts = split(prompt.substr(head.size(), prompt.size() - head.size() - 1), "; ");
    if (parts.size() != 3) return false;
    const auto nouns = split(parts[1], " "), verbs = split(parts[2], " ");
    if (nouns.size() != kCast || verbs.size() != kCast) return false;
    for (const auto& n : nouns)
        if (!in(kNouns, n)) return false;
    for (const auto& v : verbs)
        if (!in(kVerbs, v)) return false;
    auto subj = parse_noun(parts[0], nouns);
    if (!subj || !ends_with(text, ".")) return false;
    const auto sentences = split(text.substr(0, text.size() - 1), ". ");
    if (static_cast<int>(sentences.size()) != kSentences) return false;
    for (const std::string& s : sentences) {
        const auto w = split(s, " ");
        if (w.size() != 5 || w[0] != "the" || parse_noun(w[1], nouns) != subj) return false;
        const std::string& verb = w[2];
        if (subj->plural ? !in(verbs, verb)
                         : !(ends_with(verb, "s") && in(verbs, verb.substr(0, verb.size() - 1))))
            return false;
        const auto obj = parse_noun(w[4], nouns);
        if (!obj) return false;
        const std::string& art = w[3];
        if (art == "a" || art == "an") {
            const bool vowel = std::string("aeiou").find(obj->noun[0]) != std::string::npos;
            if (art != (vowel ? "an" : "a") || obj->plural) return false;
        } else if (art == "two") {
            if (!obj->plural) return false;
        } else if (art != "the") {
            return false;
        }
        subj = obj;
    }
    return true;
}

}  // namespace

bool has_checker(const std::string& task) {
    return task == "rwalk" || task == "rpick" || task == "rsent";
}

bool check_answer(const std::string& task, const std::string& prompt, const std::string& text) {
    const std::string t = trim(text);
    if (task == "rwalk") return check_rwalk(prompt, t);
    if (task == "rpick") return check_rpick(prompt, t);
    if (task == "rsent") return check_rsent(prompt, t);
    throw Error("task '" + task + "' has no answer checker (rwalk, rpick, rsent have)");
}

}  // namespace llada::tools
