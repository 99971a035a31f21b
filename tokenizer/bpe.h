// Byte-level BPE: the vocabulary's token texts, the merge ranks, and the merge loop over one word.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llada::tokenizer {

// Token texts and merges are kept as the vocabulary writes them, in the GPT-2 alphabet
// (tokenizer/unicode.h). Every distinct string that can occur as a BPE symbol (each token text,
// each single-byte character, each side and each result of a merge) is interned once as a small
// integer, so that the merge loop compares and looks up integers, never strings.
class Bpe {
  public:
    // `tokens[i]` is the text of token i; `merges[r]` is the merge of rank r, written "left right".
    // `where` names the vocabulary in error messages. Throws llada::Error on a malformed merge.
    Bpe(const std::vector<std::string_view>& tokens, const std::vector<std::string_view>& merges,
        const std::string& where);

    int32_t n_tokens() const { return static_cast<int32_t>(offsets_.size()) - 1; }
    size_t n_merges() const { return n_merges_; }

    // The text of token `id` (0 <= id < n_tokens()), as stored in the vocabulary.
    std::string_view text(int32_t id) const {
        return {texts_.get() + offsets_[id], offsets_[id + 1] - offsets_[id]};
    }
    // The token whose stored text is exactly `text`; -1 if none. When several tokens share a
    // text, the one with the highest id wins, as in llama.cpp.
    int32_t find(std::string_view text) const;

    // Reusable buffers for encode_word, so a long text allocates only once.
    struct Scratch {
        struct Symbol {
            int32_t sym;   // interned string id
            int32_t prev;  // neighbouring live symbols, -1 at the ends
            int32_t next;
            uint32_t len;  // bytes covered, starting at the symbol's own index; 0 once merged away
        };
        struct Candidate {
            int32_t rank;
            int32_t left, right;          // symbol indices
            int32_t left_sym, right_sym;  // what they held when queued, to detect stale entries
            int32_t result;
        };
        std::vector<Symbol> symbols;
        std::vector<Candidate> heap;
        std::string encoded;
    };

    // Appends the tokens of one pre-tokenized word given as raw bytes. The lowest-ranked adjacent
    // pair is merged first (leftmost on ties) until no pair has a merge. A final symbol that is
    // not a token falls back to the single-byte tokens of its bytes (bytes without one are
    // dropped). With `ignore_merges`, a word that is itself a token is emitted directly.
    void encode_word(std::string_view raw, bool ignore_merges, Scratch& scratch,
                     std::vector<int32_t>& out) const;

  private:
    int32_t intern(std::string_view s);
    int32_t find_sym(std::string_view s) const;
    size_t probe(std::string_view s, uint64_t hash) const;
    void push_candidate(Scratch& s, int32_t left, int32_t right) const;

    // Open-addressing tables: a vocabulary has ~10^5 entries of each kind, and node-based maps
    // spent most of the loading time chasing pointers.
    struct SymSlot {
        uint32_t tag;  // low bits of the hash, to skip most string compares
        int32_t sym;   // -1 when the slot is free
    };
    struct MergeSlot {
        uint64_t key;  // (left id << 32 | right id); kNoKey when the slot is free
        int32_t rank;
        int32_t result;
    };
    static constexpr uint64_t kNoKey = ~uint64_t{0};
    void grow_syms();
    void insert_merge(uint64_t key, int32_t rank, int32_t result);

    std::unique_ptr<char[]> texts_;          // all token texts, back to back
    std::vector<size_t> offsets_;            // token i is [offsets_[i], offsets_[i + 1])
    std::deque<std::string> extra_;          // interned strings that are not token texts
    std::vector<std::string_view> sym_str_;  // interned id -> string
    std::vector<int32_t> sym_token_;         // interned id -> token, or -1
    std::vector<SymSlot> sym_slots_;         // string -> interned id; size is a power of two
    int32_t byte_sym_[256];                  // raw byte -> id of its character
    std::vector<MergeSlot> merge_slots_;     // (left, right) -> merge; size is a power of two
    size_t n_merges_ = 0;
};

}  // namespace llada::tokenizer
