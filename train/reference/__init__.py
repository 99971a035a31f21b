"""PyTorch references that the C++ engine is checked against (decoding policies first).

The modules here import train/'s flat modules (`model`, `vocab`, `gguf_io`) by their top-level
names, the way train/'s own scripts do. Importing this package from anywhere (the repository root,
train/, a test runner) therefore puts train/ on sys.path first.
"""

import os
import sys

_TRAIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TRAIN_DIR not in sys.path:
    sys.path.insert(0, _TRAIN_DIR)
