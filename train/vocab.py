"""The byte-level vocabulary of the tiny models: 256 byte tokens plus special tokens.

Token i < 256 is byte i, spelled in GPT-2's byte-to-unicode alphabet as llama.cpp's `gpt2`
tokenizer model expects. There are no merges, so encoding is the UTF-8 bytes of the text and the
C++ BPE tokenizer (pre-tokenizer `gpt-2`) gives the same ids by construction.
"""

from gguf_io import STRING, INT32, UINT32, BOOL, ARRAY

BOS_TEXT = "<|startoftext|>"
EOS_TEXT = "<|endoftext|>"
MASK_TEXT = "<|mdm_mask|>"

N_BYTES = 256
BOS = 256
EOS = 257
MASK = 258
N_VOCAB = 259

# llama.cpp token types.
TOKEN_NORMAL = 1
TOKEN_CONTROL = 3


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def token_texts():
    m = bytes_to_unicode()
    return [m[b] for b in range(256)] + [BOS_TEXT, EOS_TEXT, MASK_TEXT]


def encode(text):
    """Ids of `text` (no BOS): its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode(ids):
    """Text of the byte tokens in `ids`, stopping at the first EOS; special tokens dropped."""
    out = bytearray()
    for i in ids:
        if i == EOS:
            break
        if i < N_BYTES:
            out.append(i)
    return out.decode("utf-8", errors="replace")


# The identity template: the messages' contents, concatenated.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def gguf_metadata(add_bos=True):
    """tokenizer.ggml.* entries for GGUFWriter.add(key, *spec)."""
    types = [TOKEN_NORMAL] * N_BYTES + [TOKEN_CONTROL] * 3
    return {
        "tokenizer.ggml.model": (STRING, "gpt2"),
        "tokenizer.ggml.pre": (STRING, "gpt-2"),
        "tokenizer.ggml.tokens": (ARRAY, token_texts(), STRING),
        "tokenizer.ggml.token_type": (ARRAY, types, INT32),
        "tokenizer.ggml.merges": (ARRAY, [], STRING),
        "tokenizer.ggml.bos_token_id": (UINT32, BOS),
        "tokenizer.ggml.eos_token_id": (UINT32, EOS),
        "tokenizer.ggml.padding_token_id": (UINT32, EOS),
        "tokenizer.ggml.mask_token_id": (UINT32, MASK),
        "tokenizer.ggml.add_bos_token": (BOOL, add_bos),
        # The plain chat format (tokenizer/chat.h): a chat's user message is the task prompt.
        "tokenizer.chat_template": (STRING, CHAT_TEMPLATE),
    }
