"""Trains a tiny LLaDA-architecture masked-diffusion model on the task suite and exports it.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 train/train_llada.py --preset s   # -> models/tiny-llada-s.gguf
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 train/train_llada.py --preset m   # -> models/tiny-llada-m.gguf

Objective: LLaDA's SFT loss (sft.py). Writes train/out/<name>/ (run.json, log.jsonl, checkpoints).
"""
from sft import main

if __name__ == "__main__":
    main("llada")
