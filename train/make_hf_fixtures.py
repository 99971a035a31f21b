"""Writes tests/data/hf/: tiny Hugging Face model directories and the GGUFs converted from them.

    /usr/bin/python3 train/make_hf_fixtures.py [--out DIR]

The C++ engine loads a model either from a GGUF or straight from a Hugging Face directory
(config.json, tokenizer.json, tokenizer_config.json and one or several *.safetensors). These
fixtures let the tests hold the two paths to each other: every directory has a GGUF twin laid out
as llama.cpp's convert_hf_to_gguf.py lays it out (tensor names, the row permutation of LLaDA's
query and key projections, F32 norms, token types, metadata keys), so loading either must give the
same weights, vocabulary and settings. Neither the `safetensors` nor the `tokenizers` package is
needed: both formats are written here by hand.

What is written (tests/data/hf/README.md, also written here, has the table):
  * llada/               LLaDA config names, F32, one model.safetensors, llama3 pre-tokenizer;
  * llada-bf16-sharded/  the same weights in BF16, split over three shards with an index;
  * dream/               Dream (Qwen2 config names), F16, GQA, q/k/v biases, tied embeddings,
                         qwen2 pre-tokenizer, merges in the list form;
  * llada.gguf, llada-bf16.gguf, dream.gguf: the converter's view of those directories.

All directories share one small byte-level BPE vocabulary whose merges are learned here on an
embedded corpus. Deterministic: running twice gives identical bytes (seeded generators, sorted
JSON where order is free, no timestamps).
"""

import argparse
import collections
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gguf_io import (GGML_BF16, GGML_F16, GGML_F32, INT32, STRING, GGUFWriter,  # noqa: E402
                     bf16_to_f32, f32_to_bf16)
from vocab import bytes_to_unicode  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "hf")

# --- Vocabulary ----------------------------------------------------------------------------------

# The pre-tokenizer regexes exactly as the models' tokenizer.json files carry them (and as
# tokenizer/pretokenize.cpp holds them for llama.cpp's `llama-bpe` and `qwen2` pre-types). They
# differ only in how digits group: up to three at a time for LLaMA-3, one at a time for Qwen2.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def python_regex(hf_regex):
    """An approximation of an HF regex for Python's `re`, which lacks \\p{..} classes.

    Good enough for the ASCII training corpus: a letter is a word character that is neither a
    digit nor '_', a number is a decimal digit. Only the merges' training uses it.
    """
    r = hf_regex.replace(r"[^\r\n\p{L}\p{N}]", r"(?:[^\r\n\w]|_)")
    r = r.replace(r"[^\s\p{L}\p{N}]", r"(?:[^\s\w]|_)")
    r = r.replace(r"\p{L}", r"[^\W\d_]").replace(r"\p{N}", r"\d")
    assert r"\p" not in r, r
    return re.compile(r)


# The text the merges are learned on: plain English, digits, contractions and a little
# punctuation, so that the merges include word pieces with and without a leading space.
CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs
into the forest. In the morning the other animals come out of the forest to the river.
In 1984 there were 366 days in the year; in 2023 there were 365, and in 2024 there were 366.
She said that it's the best thing in the world, but we don't think that it is.
They'll count: 1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000 and 12345 67890.
The three brothers went to the market on Monday, and then they came back at 10:30 in the
evening. Their mother was waiting for them at the door of the house.
What is 12 + 30? It is 42. What is 100 - 58? It is 42 as well.
"""

N_BYTES = 256
N_MERGES = 40
N_HOLES = 3  # ids past the last token that config.json's vocab_size still counts

BOS_TEXT = "<|startoftext|>"
EOS_TEXT = "<|endoftext|>"
MASK_TEXT = "<|mdm_mask|>"
# Added tokens, in id order after the BPE vocabulary: (text, special).
ADDED_TOKENS = [
    (BOS_TEXT, True),
    (EOS_TEXT, True),
    (MASK_TEXT, True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|eot_id|>", True),
    ("<|start_header_id|>", True),
    ("<|end_header_id|>", True),
    ("<think>", False),
]

# llama.cpp token types.
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def learn_merges(corpus, regex, n_merges):
    """Classic BPE training on the byte-level pre-tokens of `corpus`.

    Each pre-token is spelled in GPT-2's byte alphabet, one symbol per byte. Every round merges
    the most frequent adjacent pair (counted over all pre-tokens, weighted by how often each
    occurs); ties go to the pair whose texts sort first. A pair whose concatenation is already a
    token is passed over, so every merge adds exactly one new token.
    """
    b2u = bytes_to_unicode()
    words = collections.Counter(
        tuple(b2u[b] for b in piece.encode("utf-8")) for piece in regex.findall(corpus))
    tokens = set(b2u.values())
    merges = []
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        candidates = [(-count, pair) for pair, count in pairs.items()
                      if pair[0] + pair[1] not in tokens]
        if not candidates:
            raise RuntimeError(f"the corpus yields only {len(merges)} merges")
        _, (a, b) = min(candidates)
        merges.append((a, b))
        tokens.add(a + b)
        merged = collections.Counter()
        for word, count in words.items():
            out = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


class Vocab:
    """The shared vocabulary: byte tokens, merged tokens, added tokens, then unused ids."""

    def __init__(self):
        b2u = bytes_to_unicode()
        # The merges are learned once, with LLaMA-3's split; both models use the result.
        self.merges = learn_merges(CORPUS, python_regex(LLAMA3_REGEX), N_MERGES)
        self.model_tokens = [b2u[b] for b in range(N_BYTES)] + [a + b for a, b in self.merges]
        assert len(set(self.model_tokens)) == len(self.model_tokens)
        first_added = len(self.model_tokens)
        self.added = [(first_added + i, text, special)
                      for i, (text, special) in enumerate(ADDED_TOKENS)]
        self.ids = {text: i for i, text, _ in self.added}
        self.n_tokens = first_added + len(self.added)
        self.size = self.n_tokens + N_HOLES
        self.bos = self.ids[BOS_TEXT]
        self.eos = self.ids[EOS_TEXT]
        self.mask = self.ids[MASK_TEXT]

    def gguf_tokens(self):
        """Token texts and llama.cpp types for all `size` ids, as the converter lists them."""
        texts = list(self.model_tokens)
        types = [TOKEN_NORMAL] * len(texts)
        for _, text, special in self.added:
            texts.append(text)
            types.append(TOKEN_CONTROL if special else TOKEN_USER_DEFINED)
        for i in range(self.n_tokens, self.size):
            texts.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        return texts, types


# --- Chat templates ------------------------------------------------------------------------------

# The two formats as train/make_chat_fixtures.py renders them: LLaMA-3's headers (LLaDA-8B-
# Instruct) and Qwen2's ChatML with its default system message (Dream-Instruct).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# --- Model shapes --------------------------------------------------------------------------------

D = 64
FFN = 64
N_LAYERS = 2
CTX = 256
LLADA_HEADS, LLADA_KV_HEADS = 4, 4
DREAM_HEADS, DREAM_KV_HEADS = 4, 2
HEAD_DIM = D // LLADA_HEADS
assert D // DREAM_HEADS == HEAD_DIM
LLADA_ROPE_THETA, LLADA_EPS = 500000.0, 1e-5
DREAM_ROPE_THETA, DREAM_EPS = 1000000.0, 1e-6
LLADA_SEED, DREAM_SEED = 20240601, 20240602


def _matrix(rng, rows, cols):
    return (0.02 * rng.standard_normal((rows, cols))).astype(np.float32)


def _norm(rng, n):
    # Far enough from 1 that a norm skipped or applied twice changes the output visibly.
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def _bias(rng, n):
    return (0.05 * rng.standard_normal(n)).astype(np.float32)


def llada_weights(v):
    """LLaDA's HF tensors (float32, torch order [out, in]), keyed by HF name, in module order."""
    rng = np.random.default_rng(LLADA_SEED)
    w = {"model.transformer.wte.weight": _matrix(rng, v, D)}
    for i in range(N_LAYERS):
        p = f"model.transformer.blocks.{i}."
        w[p + "attn_norm.weight"] = _norm(rng, D)
        w[p + "q_proj.weight"] = _matrix(rng, LLADA_HEADS * HEAD_DIM, D)
        w[p + "k_proj.weight"] = _matrix(rng, LLADA_KV_HEADS * HEAD_DIM, D)
        w[p + "v_proj.weight"] = _matrix(rng, LLADA_KV_HEADS * HEAD_DIM, D)
        w[p + "attn_out.weight"] = _matrix(rng, D, LLADA_HEADS * HEAD_DIM)
        w[p + "ff_norm.weight"] = _norm(rng, D)
        w[p + "ff_proj.weight"] = _matrix(rng, FFN, D)  # the SwiGLU gate
        w[p + "up_proj.weight"] = _matrix(rng, FFN, D)
        w[p + "ff_out.weight"] = _matrix(rng, D, FFN)  # the down projection
    w["model.transformer.ln_f.weight"] = _norm(rng, D)
    w["model.transformer.ff_out.weight"] = _matrix(rng, v, D)  # the untied output head
    return w


def dream_weights(v):
    """Dream's HF tensors (float32 values exactly representable in F16), in module order."""
    rng = np.random.default_rng(DREAM_SEED)
    kv = DREAM_KV_HEADS * HEAD_DIM
    w = {"model.embed_tokens.weight": _matrix(rng, v, D)}
    for i in range(N_LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = _norm(rng, D)
        w[p + "self_attn.q_proj.weight"] = _matrix(rng, DREAM_HEADS * HEAD_DIM, D)
        w[p + "self_attn.q_proj.bias"] = _bias(rng, DREAM_HEADS * HEAD_DIM)
        w[p + "self_attn.k_proj.weight"] = _matrix(rng, kv, D)
        w[p + "self_attn.k_proj.bias"] = _bias(rng, kv)
        w[p + "self_attn.v_proj.weight"] = _matrix(rng, kv, D)
        w[p + "self_attn.v_proj.bias"] = _bias(rng, kv)
        w[p + "self_attn.o_proj.weight"] = _matrix(rng, D, DREAM_HEADS * HEAD_DIM)
        w[p + "post_attention_layernorm.weight"] = _norm(rng, D)
        w[p + "mlp.gate_proj.weight"] = _matrix(rng, FFN, D)
        w[p + "mlp.up_proj.weight"] = _matrix(rng, FFN, D)
        w[p + "mlp.down_proj.weight"] = _matrix(rng, D, FFN)
    w["model.norm.weight"] = _norm(rng, D)
    # Round once, so the F16 file and the GGUF's F32 norms and biases hold the same values.
    return {name: a.astype(np.float16).astype(np.float32) for name, a in w.items()}


def as_bf16_values(weights):
    """The weights rounded to BF16, kept as float32 (exact)."""
    return {name: bf16_to_f32(f32_to_bf16(a)) for name, a in weights.items()}


# HF name -> GGUF name, as llama.cpp's tensor map renames them.
def llada_gguf_name(hf):
    fixed = {"model.transformer.wte.weight": "token_embd.weight",
             "model.transformer.ln_f.weight": "output_norm.weight",
             "model.transformer.ff_out.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    m = re.fullmatch(r"model\.transformer\.blocks\.(\d+)\.(\w+)\.weight", hf)
    part = {"attn_norm": "attn_norm", "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
            "attn_out": "attn_output", "ff_norm": "ffn_norm", "ff_proj": "ffn_gate",
            "up_proj": "ffn_up", "ff_out": "ffn_down"}[m.group(2)]
    return f"blk.{m.group(1)}.{part}.weight"


def dream_gguf_name(hf):
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    if hf in fixed:
        return fixed[hf]
    m = re.fullmatch(r"model\.layers\.(\d+)\.([\w.]+)\.(weight|bias)", hf)
    part = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
            "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
            "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
            "mlp.down_proj": "ffn_down"}[m.group(2)]
    return f"blk.{m.group(1)}.{part}.{m.group(3)}"


def permute_rows(w, n_head):
    """llama.cpp's LLaDA converter permutation of a query or key projection's rows.

    Within each head, HF's rotary embedding pairs dimension j with j + head_dim/2; llama.cpp's
    pairs 2j with 2j + 1. The rows are reordered so that the second convention, applied to the
    permuted weights, computes what the first does with the originals.
    """
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


# --- File writers --------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def storage(array, dtype):
    """`array`'s bytes as safetensors `dtype` stores them (little-endian)."""
    if dtype == "BF16":
        return f32_to_bf16(array).astype("<u2").tobytes()
    return np.ascontiguousarray(array, dtype=SAFETENSORS_DTYPES[dtype]).tobytes()


def write_safetensors(path, tensors, dtype):
    """Writes {name: float32 array} as one safetensors file with every tensor in `dtype`.

    Layout: the header's length (8 bytes, little-endian), the JSON header padded with spaces to
    a multiple of 8 bytes, then the tensors back to back. They are stored sorted by name, which
    is not the model's layer order: a loader must go by the header's offsets.
    """
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        data = storage(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return offset


def write_sharded(directory, tensors, dtype, n_shards):
    """Splits the tensors, in module order, into `n_shards` runs of about equal size (as
    transformers' save_pretrained cuts shards, so a layer's tensors may straddle two files) and
    writes the shards and model.safetensors.index.json."""
    names = list(tensors)
    sizes = [len(storage(tensors[n], dtype)) for n in names]
    total = sum(sizes)
    shards = [[] for _ in range(n_shards)]
    done = 0
    for name, size in zip(names, sizes):
        # The shard is chosen by where the tensor's middle byte falls.
        shards[min(n_shards - 1, (done + size // 2) * n_shards // total)].append(name)
        done += size
    weight_map = {}
    for k, shard in enumerate(shards):
        assert shard, "a shard would be empty"
        file = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(os.path.join(directory, file), {n: tensors[n] for n in shard}, dtype)
        weight_map.update((n, file) for n in shard)
    index = {"metadata": {"total_size": total},
             "weight_map": dict(sorted(weight_map.items()))}
    write_json(os.path.join(directory, "model.safetensors.index.json"), index)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def added_token_json(i, text, special):
    return {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def tokenizer_json(vocab, flavour):
    """tokenizer.json of the `llama3` (LLaDA) or `qwen2` (Dream) flavour.

    llama3: no normalizer, merges as "a b" strings, ignore_merges (a pre-token that is itself a
    token is not split), a post-processor that prepends BOS. qwen2: an NFC normalizer, merges as
    ["a", "b"] lists, no ignore_merges key (it defaults to false), a byte-level post-processor.
    """
    llama3 = flavour == "llama3"
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None if llama3 else "",
        "end_of_word_suffix": None if llama3 else "",
        "fuse_unk": False,
        "byte_fallback": False,
    }
    if llama3:
        model["ignore_merges"] = True
    model["vocab"] = {text: i for i, text in enumerate(vocab.model_tokens)}
    if llama3:
        model["merges"] = [f"{a} {b}" for a, b in vocab.merges]
    else:
        model["merges"] = [[a, b] for a, b in vocab.merges]
    if llama3:
        bos = {"SpecialToken": {"id": BOS_TEXT, "type_id": 0}}
        post = {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": BOS_TEXT, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS_TEXT: {"id": BOS_TEXT, "ids": [vocab.bos],
                                          "tokens": [BOS_TEXT]}},
        }
    else:
        post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token_json(*t) for t in vocab.added],
        "normalizer": None if llama3 else {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX if llama3 else QWEN2_REGEX},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": llama3,
                 "use_regex": False},
            ],
        },
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": model,
    }


def tokenizer_config(vocab, flavour):
    llama3 = flavour == "llama3"
    decoder = {str(i): {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": special}
               for i, text, special in vocab.added}
    cfg = {
        "add_bos_token": llama3,
        "added_tokens_decoder": decoder,
        "bos_token": BOS_TEXT,
        "chat_template": LLAMA3_TEMPLATE if llama3 else CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TEXT,
        "model_max_length": CTX,
        "pad_token": EOS_TEXT,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if not llama3:
        cfg["errors"] = "replace"
        cfg["mask_token"] = MASK_TEXT
        cfg["split_special_tokens"] = False
    return cfg


def llada_config(vocab):
    # torch_dtype is LLaDA-8B's "bfloat16" in both LLaDA directories, whatever the files hold:
    # the tensors' own dtypes are in the safetensors headers.
    return {
        "activation_type": "silu",
        "alibi": False,
        "architectures": ["LLaDAModelLM"],
        "block_type": "llama",
        "d_model": D,
        "embedding_size": vocab.size,
        "eos_token_id": vocab.eos,
        "include_bias": False,
        "include_qkv_bias": False,
        "layer_norm_type": "rms",
        "mask_token_id": vocab.mask,
        "max_sequence_length": CTX,
        "mlp_hidden_size": FFN,
        "model_type": "llada",
        "n_heads": LLADA_HEADS,
        "n_kv_heads": LLADA_KV_HEADS,
        "n_layers": N_LAYERS,
        "pad_token_id": vocab.eos,
        "rms_norm_eps": LLADA_EPS,
        "rope": True,
        "rope_theta": LLADA_ROPE_THETA,
        "torch_dtype": "bfloat16",
        "use_cache": False,
        "vocab_size": vocab.size,
        "weight_tying": False,
    }


def dream_config(vocab):
    # torch_dtype is Dream-7B's "bfloat16" although this directory's file is F16 (see above).
    return {
        "architectures": ["DreamModel"],
        "attention_dropout": 0.0,
        "bos_token_id": vocab.bos,
        "eos_token_id": vocab.eos,
        "hidden_act": "silu",
        "hidden_size": D,
        "intermediate_size": FFN,
        "mask_token_id": vocab.mask,
        "max_position_embeddings": CTX,
        "model_type": "Dream",
        "num_attention_heads": DREAM_HEADS,
        "num_hidden_layers": N_LAYERS,
        "num_key_value_heads": DREAM_KV_HEADS,
        "pad_token_id": vocab.eos,
        "rms_norm_eps": DREAM_EPS,
        "rope_scaling": None,
        "rope_theta": DREAM_ROPE_THETA,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": vocab.size,
    }


def write_hf_dir(directory, config, vocab, flavour):
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, "config.json"), config)
    write_json(os.path.join(directory, "tokenizer.json"), tokenizer_json(vocab, flavour))
    write_json(os.path.join(directory, "tokenizer_config.json"), tokenizer_config(vocab, flavour))


# --- GGUF twins ----------------------------------------------------------------------------------

# general.file_type as the converter records it.
FILE_TYPE = {GGML_F32: 0, GGML_F16: 1, GGML_BF16: 32}


def add_tokenizer(w, vocab, pre, add_bos, template):
    texts, types = vocab.gguf_tokens()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", STRING, texts)
    w.add_array("tokenizer.ggml.token_type", INT32, types)
    w.add_array("tokenizer.ggml.merges", STRING, [f"{a} {b}" for a, b in vocab.merges])
    w.add_u32("tokenizer.ggml.bos_token_id", vocab.bos)
    w.add_u32("tokenizer.ggml.eos_token_id", vocab.eos)
    w.add_u32("tokenizer.ggml.padding_token_id", vocab.eos)
    w.add_u32("tokenizer.ggml.mask_token_id", vocab.mask)
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    w.add_string("tokenizer.chat_template", template)


def add_hparams(w, arch, heads, kv_heads, eps, theta):
    w.add_u32(f"{arch}.block_count", N_LAYERS)
    w.add_u32(f"{arch}.context_length", CTX)
    w.add_u32(f"{arch}.embedding_length", D)
    w.add_u32(f"{arch}.feed_forward_length", FFN)
    w.add_u32(f"{arch}.attention.head_count", heads)
    w.add_u32(f"{arch}.attention.head_count_kv", kv_heads)
    w.add_f32(f"{arch}.attention.layer_norm_rms_epsilon", eps)
    w.add_f32(f"{arch}.rope.freq_base", theta)


def write_llada_gguf(path, name, weights, vocab, matrix_type):
    """`weights` are the values the HF directory holds (already rounded for BF16)."""
    w = GGUFWriter()
    w.add_string("general.architecture", "llada")
    w.add_string("general.name", name)
    add_hparams(w, "llada", LLADA_HEADS, LLADA_KV_HEADS, LLADA_EPS, LLADA_ROPE_THETA)
    w.add_u32("llada.vocab_size", vocab.size)
    w.add_u32("llada.rope.dimension_count", HEAD_DIM)
    w.add_bool("llada.attention.causal", False)
    w.add_bool("diffusion.shift_logits", False)
    w.add_u32("general.file_type", FILE_TYPE[matrix_type])
    w.add_u32("general.quantization_version", 2)
    add_tokenizer(w, vocab, "llama-bpe", True, LLAMA3_TEMPLATE)
    for hf, a in weights.items():
        if hf.endswith(".q_proj.weight"):
            a = permute_rows(a, LLADA_HEADS)
        elif hf.endswith(".k_proj.weight"):
            a = permute_rows(a, LLADA_KV_HEADS)
        # As in the converter, 1-D tensors (the norms) stay F32 whatever the matrices become.
        w.add_tensor(llada_gguf_name(hf), a, GGML_F32 if a.ndim == 1 else matrix_type)
    w.write(path)


def write_dream_gguf(path, name, weights, vocab):
    w = GGUFWriter()
    w.add_string("general.architecture", "dream")
    w.add_string("general.name", name)
    add_hparams(w, "dream", DREAM_HEADS, DREAM_KV_HEADS, DREAM_EPS, DREAM_ROPE_THETA)
    w.add_bool("dream.attention.causal", False)
    w.add_u32("general.file_type", FILE_TYPE[GGML_F16])
    w.add_u32("general.quantization_version", 2)
    add_tokenizer(w, vocab, "qwen2", False, CHATML_TEMPLATE)
    for hf, a in weights.items():
        # Norms and biases (1-D) stay F32; Dream's rotary layout needs no permutation.
        w.add_tensor(dream_gguf_name(hf), a, GGML_F32 if a.ndim == 1 else GGML_F16)
    w.write(path)


# --- README --------------------------------------------------------------------------------------

README_FILES = [
    ("`llada/`", "LLaDA (`LLaDAModelLM`): config.json, tokenizer.json (llama3 split, "
     "`ignore_merges`, merges as `\"a b\"`), tokenizer_config.json (llama3 chat template, "
     "`add_bos_token` true), one F32 `model.safetensors`"),
    ("`llada-bf16-sharded/`", "the same model in BF16 over three shards + "
     "`model.safetensors.index.json`; same config and tokenizer files"),
    ("`dream/`", "Dream (`DreamModel`, Qwen2 names): GQA (4 heads, 2 KV heads), q/k/v biases, "
     "tied embeddings, qwen2 split, NFC normalizer, merges as `[\"a\", \"b\"]`, ChatML "
     "template, `add_bos_token` false, one F16 `model.safetensors`"),
    ("`llada.gguf`", "`llada/` as llama.cpp's converter writes it (F32)"),
    ("`llada-bf16.gguf`", "`llada-bf16-sharded/` converted: BF16 matrices, F32 norms"),
    ("`dream.gguf`", "`dream/` converted: F16 matrices, F32 norms and biases, no `output.weight`"),
]


def readme(vocab):
    def cell(text):
        # A table cell's pipes must be escaped, even inside backticks.
        return text.replace("|", "\\|")

    files = "\n".join(f"| {path} | {what} |" for path, what in README_FILES)
    added = "\n".join(f"| {i} | `{cell(text)}` | {'special' if special else 'not special'} |"
                      for i, text, special in vocab.added)
    n_merges = len(vocab.merges)
    byte_ids = f"0-{N_BYTES - 1}"
    merge_ids = f"{N_BYTES}-{N_BYTES + n_merges - 1}"
    hole_ids = f"{vocab.n_tokens}-{vocab.size - 1}"
    return f"""# Hugging Face model directories and their GGUF twins

Written by `train/make_hf_fixtures.py`; do not edit by hand. Regenerate with

    /usr/bin/python3 train/make_hf_fixtures.py

| path | what it is |
|---|---|
{files}

Each model: 2 layers, width {D}, feed-forward {FFN}, head dim {HEAD_DIM}, context {CTX}; random
weights (matrices N(0, 0.02), norm weights 1 + 0.1 N(0, 1), biases N(0, 0.05)). Safetensors files
store their tensors sorted by name, not in layer order.

The GGUFs differ from the directories as the converter makes them differ: tensors renamed to
`token_embd`, `blk.N.attn_q`, ... ; the rows of LLaDA's `q_proj` and `k_proj` permuted per head
(`w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2)`), Dream's not; 1-D tensors in
F32.

The vocabulary, shared by all three, has {vocab.size} ids (config.json's `vocab_size`): the
bytes in GPT-2's byte-to-unicode alphabet ({byte_ids}), {n_merges} merges learned on the script's
corpus with LLaMA-3's split ({merge_ids}), the added tokens below, and {N_HOLES} ids with no token
({hole_ids}), which the GGUFs list as `[PAD<id>]` with type UNUSED.

| id | added token | |
|---|---|---|
{added}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    vocab = Vocab()

    llada = llada_weights(vocab.size)
    d = os.path.join(out, "llada")
    write_hf_dir(d, llada_config(vocab), vocab, "llama3")
    write_safetensors(os.path.join(d, "model.safetensors"), llada, "F32")
    write_llada_gguf(os.path.join(out, "llada.gguf"), "tiny-hf-llada", llada, vocab, GGML_F32)

    d = os.path.join(out, "llada-bf16-sharded")
    write_hf_dir(d, llada_config(vocab), vocab, "llama3")
    write_sharded(d, llada, "BF16", 3)
    # The converter reads the BF16 shards, so the twin holds the rounded values (norms too).
    write_llada_gguf(os.path.join(out, "llada-bf16.gguf"), "tiny-hf-llada-bf16",
                     as_bf16_values(llada), vocab, GGML_BF16)

    dream = dream_weights(vocab.size)
    d = os.path.join(out, "dream")
    write_hf_dir(d, dream_config(vocab), vocab, "qwen2")
    write_safetensors(os.path.join(d, "model.safetensors"), dream, "F16")
    write_dream_gguf(os.path.join(out, "dream.gguf"), "tiny-hf-dream", dream, vocab)

    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(readme(vocab))
    print(f"{out}: vocabulary {vocab.size} ids ({vocab.n_tokens} tokens, {len(vocab.merges)} "
          f"merges); bos {vocab.bos}, eos {vocab.eos}, mask {vocab.mask}")


if __name__ == "__main__":
    main()
