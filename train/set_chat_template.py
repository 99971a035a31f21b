"""Writes the plain chat template (vocab.CHAT_TEMPLATE) into GGUF files in place.

The shipped tiny models were exported before their files declared a chat format; this adds
`tokenizer.chat_template` without touching the tensors (new exports carry it already):

    /usr/bin/python3 train/set_chat_template.py models/tiny-*.gguf
"""

import sys

import gguf_io
import vocab

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: set_chat_template.py FILE.gguf...")
    for path in sys.argv[1:]:
        gguf_io.set_string(path, "tokenizer.chat_template", vocab.CHAT_TEMPLATE)
        print(f"{path}: tokenizer.chat_template set")
