"""Writes the fuzz targets' seed corpora (one folder per target) from what the repository has and,
when ../shared is there, from its fixtures (llama.cpp's GGUFs and tokenizer test texts).

    python3 fuzz/make_corpus.py OUT_DIR BIN_DIR     # scripts/fuzz.sh runs it

gguf:      random-weight models of the `tiny` shape in every weight type (llada-quantize
           --synthetic), the shipped tiny models' first 64 KiB (header and metadata, then a cut),
           the fixture GGUFs (llama.cpp's converter) when present
tokenizer: a selector byte (vocabulary and special-token parsing) + task prompts and answers,
           the fixtures' tokenizer test texts, a few hostile strings
chat:      the templates of tests/data/chat/golden.json + NUL + message contents
request:   request bodies for both endpoints, valid and not
safetensors: small files of every dtype, with and without __metadata__
hf_tokenizer: tests/data/hf's tokenizer.json + NUL + tokenizer_config.json + NUL + config.json
"""

import glob
import json
import os
import struct
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHARED = os.path.join(ROOT, "..", "shared", "fixtures")


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))


def main():
    out, bindir = sys.argv[1], sys.argv[2]
    g = os.path.join(out, "gguf")
    for t in ("F32", "F16", "Q8_0", "Q4_0"):
        path = os.path.join(g, f"synthetic-tiny-{t}.gguf")
        os.makedirs(g, exist_ok=True)
        subprocess.run([os.path.join(bindir, "llada-quantize"), "--synthetic", "tiny", "--type", t,
                        "--out", path, "-t", "1"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    for m in sorted(glob.glob(os.path.join(ROOT, "models", "*.gguf"))):
        with open(m, "rb") as f:
            write(g, "head-" + os.path.basename(m), f.read(65536))
    for m in sorted(glob.glob(os.path.join(SHARED, "llamacpp", "*", "model.gguf"))):
        with open(m, "rb") as f:
            write(g, "fixture-" + os.path.basename(os.path.dirname(m)) + ".gguf", f.read())

    t = os.path.join(out, "tokenizer")
    texts = []
    for task in sorted(glob.glob(os.path.join(ROOT, "models", "tasks", "*-hard.jsonl"))):
        with open(task) as f:
            for line in list(f)[:20]:
                r = json.loads(line)
                texts.append(r["prompt"] + r["answer"])
    for inp in sorted(glob.glob(os.path.join(SHARED, "tokenizer", "*.inp"))):
        with open(inp, "rb") as f:
            texts += [x.decode("utf-8", "surrogateescape")
                      for x in f.read().split(b"\n__ggml_vocab_test__\n") if x]
    texts += ["", " ", "\n\n\t  x", b"\xff\xfe invalid \xc3".decode("utf-8", "surrogateescape"),
              "<|im_start|>user\nhi<|im_end|>",
              "<tool><|mask|><|eot_id|>", "the theing 123 1234567 ünïcode 🦙 \u3000 a\u200bb"]
    for i, s in enumerate(texts):
        write(t, f"text-{i:04d}", bytes([i % 16]) + s.encode("utf-8", "surrogateescape"))

    c = os.path.join(out, "chat")
    with open(os.path.join(ROOT, "tests", "data", "chat", "golden.json")) as f:
        cases = json.load(f)["cases"]
    for i, case in enumerate(cases):
        body = case["template"] + "\0" + "\0".join(m["content"] for m in case["messages"])
        write(c, f"case-{i:02d}", body)
    write(c, "mistral", "{{ bos_token }}[INST] {{ messages }} [/INST]\0hi")
    write(c, "empty", "")

    r = os.path.join(out, "request")
    bodies = [
        {"prompt": "sort 56 44 46 59 52 58:", "max_tokens": 32},
        {"prompt": "x", "max_tokens": 32, "stream": True, "diffusion_events": True, "seed": 4,
         "temperature": 1.0, "stop": ["a", "b"]},
        {"prompt": "x", "policy": "mbsd", "lookahead": 8, "threshold": 0.7, "revise": True,
         "block": 4, "steps": 16},
        {"messages": [{"role": "system", "content": "s"},
                      {"role": "user", "content": [{"type": "text", "text": "t"}]}]},
        {"prompt": "x", "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "user": "u",
         "n": 1, "model": "m", "stop": None},
        {"prompt": 3, "max_tokens": "many", "wings": 2},
        {"messages": [{"role": 5}], "n": 2, "policy": "ar"},
    ]
    for i, b in enumerate(bodies):
        write(r, f"body-{i:02d}.json", json.dumps(b))
    write(r, "array.json", "[1, 2, {}]")
    write(r, "deep.json", "[" * 64 + "]" * 64)

    # safetensors: small files of every dtype the reader knows, with and without metadata
    st = os.path.join(out, "safetensors")
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
             "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
    for i, (dt, size) in enumerate(sizes.items()):
        header, data = {}, b""
        if i % 2:
            header["__metadata__"] = {"format": "pt", "dtype": dt}
        for j, shape in enumerate(([2, 3], [4], [1, 1, 2])):
            n = size
            for d in shape:
                n *= d
            header[f"model.layers.{j}.weight"] = {"dtype": dt, "shape": shape,
                                                  "data_offsets": [len(data), len(data) + n]}
            data += bytes((k * 37 + i) % 256 for k in range(n))
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        write(st, f"{dt}.safetensors", struct.pack("<Q", len(h)) + h + data)

    # hf_tokenizer: each test directory's three JSON files, NUL-separated
    for d in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "hf", "*", "config.json"))):
        d = os.path.dirname(d)
        parts = []
        for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
            with open(os.path.join(d, name), "rb") as f:
                parts.append(f.read())
        write(os.path.join(out, "hf_tokenizer"), os.path.basename(d) + ".bin", b"\0".join(parts))


if __name__ == "__main__":
    main()
