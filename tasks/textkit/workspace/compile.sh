#!/bin/sh
# Builds ./executable, the program the hidden tests run: a launcher of this repository's textkit
# package (python3 -m textkit), wherever the repository is.
set -e
cd "$(dirname "$0")"
cat > executable <<'LAUNCHER'
#!/bin/sh
HERE=$(dirname "$(readlink -f "$0")")
PYTHONPATH="$HERE" exec python3 -S -m textkit "$@"
LAUNCHER
chmod +x executable
