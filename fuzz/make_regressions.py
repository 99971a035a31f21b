"""Writes the hostile seed inputs under fuzz/regressions/ (committed; ctest replays them through
every fuzz target in every build, and scripts/fuzz.sh starts from them). Inputs that crashed a
target once are added to the same folders by hand, named after what they found.

    python3 fuzz/make_regressions.py
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "regressions", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(n_tensors, kvs, infos=b"", data=b"", version=3):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs) + infos + data


def kv_str(k, v):
    return gstr(k) + struct.pack("<I", 8) + gstr(v)


def kv_u32(k, v):
    return gstr(k) + struct.pack("<II", 4, v)


def safetensors(header, data=b"", pad=True):
    """A safetensors file: the header (a dict, or raw bytes) JSON-encoded, then the data."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    one = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
           "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}
    put("safetensors", "valid-two-tensors", safetensors(one, bytes(range(22))))
    put("safetensors", "header-length-2^63", struct.pack("<Q", 1 << 63) + b"{}")
    put("safetensors", "truncated", b"\x10\x00\x00")
    put("safetensors", "not-json", safetensors(b"{not json", b""))
    put("safetensors", "duplicate-name", safetensors(
        b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
        b'"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}', b"xy"))
    put("safetensors", "offsets-past-end", safetensors(
        {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 62]}}, b"\0" * 16))
    put("safetensors", "overlap", safetensors(
        {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
         "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6))
    put("safetensors", "shape-overflow", safetensors(
        {"a": {"dtype": "F64", "shape": [1 << 32, 1 << 32, 16], "data_offsets": [0, 0]}}))
    put("safetensors", "negative-shape", safetensors(
        {"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4))
    put("safetensors", "metadata-not-strings", safetensors({"__metadata__": {"n": 3}}))

    arch = kv_str("general.architecture", "llada")
    put("gguf", "truncated-header", b"GGUF\x03\x00\x00")
    put("gguf", "kv-count-2^63", b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 63))
    put("gguf", "string-length-2^62", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) +
        struct.pack("<Q", 1 << 62) + b"key")
    put("gguf", "array-of-2^40-u32", gguf(0, [gstr("a") + struct.pack("<IIQ", 9, 4, 1 << 40)]))
    put("gguf", "alignment-zero", gguf(0, [arch, kv_u32("general.alignment", 0)]))
    info = gstr("t") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 4) + struct.pack("<IQ", 0, 1 << 40)
    put("gguf", "tensor-offset-past-end", gguf(1, [arch], info, b"\0" * 64))
    info5 = gstr("t") + struct.pack("<I", 5) + struct.pack("<QQQQQ", 1, 1, 1, 1, 1) + struct.pack("<IQ", 0, 0)
    put("gguf", "tensor-five-dims", gguf(1, [arch], info5, b"\0" * 64))
    infom = gstr("t") + struct.pack("<I", 2) + struct.pack("<QQ", 1 << 32, 1 << 32) + struct.pack("<IQ", 0, 0)
    put("gguf", "tensor-elements-overflow", gguf(1, [arch], infom, b"\0" * 64))
    toks = gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + gstr("a") + gstr("b")
    put("gguf", "vocab-without-model", gguf(0, [arch, toks, kv_str("tokenizer.ggml.model", "gpt2"),
                                               kv_u32("tokenizer.ggml.bos_token_id", 99)]))

    texts = [b"\xff\xfe\xc3 invalid \xe2\x82", "<|im_start|><|im_start|>x<|im_end|>".encode(),
             b" " * 300, "\u3000\u200b\U0001F999 123456789 don't".encode()]
    for i, t in enumerate(texts):
        put("tokenizer", f"text-{i}", bytes([i]) + t)

    put("chat", "llama3-only-open", "<|start_header_id|>\0a")
    put("chat", "chatml-unterminated-system", "<|im_start|>system\\nYou are\0a\0b")
    put("chat", "many-empty-messages", "{% for message in messages %}{{ message['content'] }}{% endfor %}" + "\0" * 64)

    bodies = {
        "stop-nested": {"prompt": "x", "stop": [["a"]]},
        "messages-content-object": {"messages": [{"role": "user", "content": {"text": "x"}}]},
        "numbers-as-strings": {"prompt": "x", "max_tokens": "32", "seed": -1, "temperature": 1e308},
        "huge-values": {"prompt": "x", "max_tokens": 1e30, "block": -5, "steps": 0, "lookahead": 1e9},
        "null-everything": {"prompt": None, "stream": None, "revise": None, "n": None},
        "events-not-bool": {"prompt": "x", "stream": True, "diffusion_events": "yes"},
    }
    for name, b in bodies.items():
        put("request", name + ".json", json.dumps(b))
    put("request", "top-level-string.json", '"prompt"')

    # hf_tokenizer: tokenizer.json NUL tokenizer_config.json NUL config.json
    def hf(tok, tc=None, cfg=None):
        parts = [json.dumps(tok), json.dumps(tc) if tc is not None else "", json.dumps(cfg or {})]
        return "\0".join(parts)
    byte_level = {"type": "ByteLevel", "use_regex": True}
    vocab = {"a": 0, "b": 1, "ab": 2}
    bpe = {"type": "BPE", "vocab": vocab, "merges": ["a b"]}
    put("hf_tokenizer", "valid-gpt2", hf({"model": bpe, "pre_tokenizer": byte_level,
                                          "added_tokens": [{"id": 3, "content": "<s>", "special": True}]},
                                         {"bos_token": "<s>", "add_bos_token": True}, {"vocab_size": 5}))
    put("hf_tokenizer", "negative-id", hf({"model": {"type": "BPE", "vocab": {"a": -4}, "merges": []},
                                           "pre_tokenizer": byte_level}))
    put("hf_tokenizer", "id-past-vocab", hf({"model": bpe, "pre_tokenizer": byte_level},
                                            None, {"vocab_size": 2}))
    put("hf_tokenizer", "merge-not-a-pair", hf({"model": {"type": "BPE", "vocab": vocab,
                                                          "merges": [["a"], 3, "a"]},
                                                "pre_tokenizer": byte_level}))
    put("hf_tokenizer", "merge-of-unknown-tokens", hf({"model": {"type": "BPE", "vocab": vocab,
                                                                 "merges": ["x y", "ab ab"]},
                                                       "pre_tokenizer": byte_level}))
    put("hf_tokenizer", "bos-not-in-vocab", hf({"model": bpe, "pre_tokenizer": byte_level},
                                               {"bos_token": {"content": 7}}, {"bos_token_id": 99}))
    put("hf_tokenizer", "split-without-regex", hf({"model": bpe, "pre_tokenizer": {
        "type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "}}]}}))
    put("hf_tokenizer", "added-token-no-id", hf({"model": bpe, "pre_tokenizer": byte_level,
                                                 "added_tokens": [{"content": "<x>"}]}))
    put("hf_tokenizer", "empty-vocab", hf({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    put("hf_tokenizer", "not-json", "{tokenizer\0{\0[")
    put("hf_tokenizer", "added-token-negative-id", hf({"model": bpe, "pre_tokenizer": byte_level,
                                                       "added_tokens": [{"id": -1, "content": "<x>"}]}))
    put("hf_tokenizer", "added-token-huge-id", hf({"model": bpe, "pre_tokenizer": byte_level,
                                                   "added_tokens": [{"id": 1 << 40, "content": "<x>"}]}))


if __name__ == "__main__":
    main()
