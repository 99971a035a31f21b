"""Trains a tiny LLaDA-architecture masked-diffusion model on the task suite and exports it.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 train/train_llada.py --preset s --threads 1   # -> models/tiny-llada-s.gguf
    OMP_WAIT_POLICY=ACTIVE /usr/bin/python3 train/train_llada.py --preset m --threads 2   # -> models/tiny-llada-m.gguf

PASSIVE when something else runs (two trainings side by side, one thread each); ACTIVE with two
threads when the training has the machine to itself (~1.5x faster per step: OpenMP's workers spin
between the step's many small operations instead of sleeping). models/README.md has the times.

Objective: LLaDA's SFT loss (sft.py). Writes train/out/<name>/ (run.json, log.jsonl, checkpoints).
"""
from sft import main

if __name__ == "__main__":
    main("llada")
