// Byte-level BPE: the vocabulary's token texts, the merge ranks, and the merge loop over one word.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace llada::tokenizer {
namespace {

// Heap order: the candidate that should merge first is the one with the lowest rank, then the
// leftmost; std::push_heap keeps the "largest" on top, so "less" means "merges later". A function
// object rather than a function pointer, so that the heap operations inline it.
struct MergesLater {
    bool operator()(const Bpe::Scratch::Candidate& a, const Bpe::Scratch::Candidate& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

// A finaliser that spreads every input bit over the whole word (MurmurHash3's fmix64).
uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

// Token texts are short (a few bytes on average), so a word-at-a-time hash is plenty.
uint64_t hash_bytes(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = mix64(h ^ w);
    }
    uint64_t tail = 0;
    if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
    return mix64(h ^ tail);
}

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
}

std::string quoted(std::string_view s) {
    constexpr size_t kMax = 60;
    std::string out = "'";
    out += s.substr(0, kMax);
    if (s.size() > kMax) out += "...";
    out += "'";
    return out;
}

}  // namespace

Bpe::Bpe(const std::vector<std::string_view>& tokens, const std::vector<std::string_view>& merges,
         const std::string& where) {
    size_t total = 0;
    for (auto t : tokens)
        total += t.size();
    texts_ = std::make_unique<char[]>(total + 1);
    offsets_.resize(tokens.size() + 1);
    // Nearly every merge side and result is a token text, so the interned strings number little
    // more than the tokens; the table is kept at most half full.
    size_t expected = tokens.size() + 256 + merges.size() / 16;
    size_t cap = 64;
    while (cap < 2 * expected)
        cap *= 2;
    sym_slots_.assign(cap, SymSlot{0, -1});
    sym_str_.reserve(expected);
    sym_token_.reserve(expected);

    size_t pos = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        offsets_[i] = pos;
        if (!tokens[i].empty()) std::memcpy(texts_.get() + pos, tokens[i].data(), tokens[i].size());
        std::string_view stored(texts_.get() + pos, tokens[i].size());
        pos += tokens[i].size();
        // An empty text can never be a BPE symbol and is not worth finding.
        if (stored.empty()) continue;
        if (2 * (sym_str_.size() + 1) > sym_slots_.size()) grow_syms();
        uint64_t h = hash_bytes(stored);
        SymSlot& slot = sym_slots_[probe(stored, h)];
        if (slot.sym >= 0) {
            sym_token_[slot.sym] = static_cast<int32_t>(i);  // a later duplicate wins
            continue;
        }
        slot = {static_cast<uint32_t>(h >> 32), static_cast<int32_t>(sym_str_.size())};
        sym_str_.push_back(stored);
        sym_token_.push_back(static_cast<int32_t>(i));
    }
    offsets_[tokens.size()] = pos;

    // Every word starts as one symbol per byte, so each byte's character needs an id even when
    // the vocabulary lacks it.
    std::string ch;
    for (int b = 0; b < 256; ++b) {
        ch.clear();
        append_utf8(ch, gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
        byte_sym_[b] = intern(ch);
    }

    cap = 64;
    while (cap < 2 * merges.size())
        cap *= 2;
    merge_slots_.assign(cap, MergeSlot{kNoKey, 0, 0});
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
        std::string_view m = merges[r];
        // The separator is the first space after the first character: a merge's left side is
        // never empty, and no byte-level token contains a raw space (it is written 'Ġ').
        size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
        if (sp == std::string_view::npos || sp + 1 >= m.size()) {
            throw Error(where + ": BPE merge " + std::to_string(r) + " (" + quoted(m) +
                        ") is malformed: expected two non-empty tokens separated by a space "
                        "(tokenizer.ggml.merges)");
        }
        std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
        int32_t ls = intern(left);
        int32_t rs = intern(right);
        joined.assign(left);
        joined += right;
        int32_t js = intern(joined);
        insert_merge(pair_key(ls, rs), static_cast<int32_t>(r), js);
    }
    n_merges_ = merges.size();
}

size_t Bpe::probe(std::string_view s, uint64_t h) const {
    const size_t mask = sym_slots_.size() - 1;
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const SymSlot& slot = sym_slots_[i];
        if (slot.sym < 0 || (slot.tag == tag && sym_str_[slot.sym] == s)) return i;
    }
}

void Bpe::grow_syms() {
    std::vector<SymSlot> old(sym_slots_.size() * 2, SymSlot{0, -1});
    old.swap(sym_slots_);
    const size_t mask = sym_slots_.size() - 1;
    for (const SymSlot& slot : old) {
        if (slot.sym < 0) continue;
        uint64_t h = hash_bytes(sym_str_[slot.sym]);
        size_t i = h & mask;
        while (sym_slots_[i].sym >= 0)
            i = (i + 1) & mask;
        sym_slots_[i] = slot;
    }
}

int32_t Bpe::intern(std::string_view s) {
    if (2 * (sym_str_.size() + 1) > sym_slots_.size()) grow_syms();
    uint64_t h = hash_bytes(s);
    SymSlot& slot = sym_slots_[probe(s, h)];
    if (slot.sym >= 0) return slot.sym;
    const std::string& kept = extra_.emplace_back(s);
    slot = {static_cast<uint32_t>(h >> 32), static_cast<int32_t>(sym_str_.size())};
    sym_str_.push_back(kept);
    sym_token_.push_back(-1);
    return slot.sym;
}

int32_t Bpe::find_sym(std::string_view s) const {
    return sym_slots_[probe(s, hash_bytes(s))].sym;
}

int32_t Bpe::find(std::string_view text) const {
    int32_t sym = find_sym(text);
    return sym < 0 ? -1 : sym_token_[sym];
}

void Bpe::insert_merge(uint64_t key, int32_t rank, int32_t result) {
    const size_t mask = merge_slots_.size() - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        MergeSlot& slot = merge_slots_[i];
        if (slot.key == key) return;  // a repeated pair keeps its first (lowest) rank
        if (slot.key == kNoKey) {
            slot = {key, rank, result};
            return;
        }
    }
}

void Bpe::push_candidate(Scratch& s, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    int32_t ls = s.symbols[left].sym, rs = s.symbols[right].sym;
    uint64_t key = pair_key(ls, rs);
    const size_t mask = merge_slots_.size() - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        const MergeSlot& slot = merge_slots_[i];
        if (slot.key == kNoKey) return;
        if (slot.key == key) {
            s.heap.push_back({slot.rank, left, right, ls, rs, slot.result});
            std::push_heap(s.heap.begin(), s.heap.end(), MergesLater{});
            return;
        }
    }
}
void Bpe::encode_word(std::string_view raw, bool ignore_merges, Scratch& s,
                      std::vector<int32_t>& out) const {
    const size_t n = raw.size();
    if (n == 0) return;
    const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());

    if (ignore_merges) {
        s.encoded.clear();
        for (size_t i = 0; i < n; ++i)
            append_utf8(s.encoded, gpt2_byte_to_codepoint(bytes[i]));
        int32_t id = find(s.encoded);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }

    s.symbols.resize(n);
    for (size_t i = 0; i < n; ++i) {
        s.symbols[i] = {byte_sym_[bytes[i]], static_cast<int32_t>(i) - 1,
                        i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 1};
    }
    s.heap.clear();
    for (size_t i = 1; i < n; ++i) {
        push_candidate(s, static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    }

    while (!s.heap.empty()) {
        std::pop_heap(s.heap.begin(), s.heap.end(), MergesLater{});
        Scratch::Candidate c = s.heap.back();
        s.heap.pop_back();
        auto& l = s.symbols[c.left];
        auto& r = s.symbols[c.right];
        // Symbols only grow, so a candidate whose sides changed since it was queued is stale.
        if (l.len == 0 || r.len == 0 || l.sym != c.left_sym || r.sym != c.right_sym) continue;
        l.sym = c.result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) s.symbols[r.next].prev = c.left;
        push_candidate(s, l.prev, c.left);
        push_candidate(s, c.left, l.next);
    }

    // Symbol 0 never merges into a left neighbour, so the chain starts there.
    for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
        const auto& sym = s.symbols[i];
        int32_t id = sym_token_[sym.sym];
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // A vocabulary whose merges produce strings it does not list gets here, and a byte
        // without a token of its own. Each byte becomes its own byte token; llama.cpp instead
        // looks up the single UTF-8 bytes of the alphabet text, which agrees for printable ASCII
        // and drops the other bytes.
        for (uint32_t k = 0; k < sym.len; ++k) {
            const uint8_t byte = bytes[i + k];
            const int32_t b = sym_token_[byte_sym_[byte]];
            if (b < 0) {
                // Dropping the byte would change the text the model sees.
                char hex[8];
                std::snprintf(hex, sizeof(hex), "0x%02X", byte);
                throw Error(std::string("the vocabulary has no token for byte ") + hex +
                            ", so this text cannot be encoded (a byte-level BPE vocabulary "
                            "lists all 256 bytes)");
            }
            out.push_back(b);
        }
    }
}

}  // namespace llada::tokenizer
