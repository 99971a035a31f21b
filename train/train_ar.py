"""Trains the autoregressive twin (arch `llama`, causal, next-token loss) on the same data.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 train/train_ar.py --preset s --threads 1   # -> models/tiny-ar-s.gguf

Writes train/out/<name>/ (run.json, log.jsonl, checkpoints).
"""
from sft import main

if __name__ == "__main__":
    main("llama")
