#!/bin/bash
# Builds ./executable, the textkit reference, from src/: an ELF with the Python interpreter embedded
# and the program's compiled code inside it, so that it can be execute-only (mode 0111).
set -euo pipefail
python3 build_exe.py textkit_ref.py executable textkit
