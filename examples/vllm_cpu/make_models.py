"""Build the tiny random-init Llama models used by the recordings (see specobs.testing.tiny_llama).

Usage:  python make_models.py OUT_DIR
"""

import sys

from specobs.testing.tiny_llama import build

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, path in build(sys.argv[1]).items():
        print(f"{name}: {path}")
