#!/usr/bin/env bash
# check_wheel.sh WHEEL: install a croupier wheel where no Go toolchain is on
# PATH and use it (make test-wheel).
#
# The wheel must be tagged manylinux for this machine and its libcroupier.so
# must need no shared library but glibc's. It is installed into a fresh
# virtual environment made from the interpreter of the repository's .venv;
# torch, pyarrow, numpy and pytest come from that .venv through a .pth file,
# which Python reads after the environment's own site-packages, so the
# installed croupier is the one imported. There, with PATH holding no go, the
# demo trains, checkpoints and resumes with two spawned DataLoader workers,
# and the table and permutation tests run against the installed package.
# Then, in a second environment that holds the wheel, pyarrow and numpy (the
# .venv's, linked) and no torch, numpy and Arrow batches are read
# (python/tests/without_torch.py).
set -euo pipefail

wheel=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
py="$repo/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case $(basename "$wheel") in
*-py3-none-manylinux_2_*_"$(uname -m)".whl) ;;
*) echo "check_wheel: $wheel is not a py3-none-manylinux wheel for $(uname -m)" >&2; exit 1 ;;
esac

"$py" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("croupier/libcroupier.so"))' \
	"$wheel" >"$tmp/libcroupier.so"
for lib in $(objdump -p "$tmp/libcroupier.so" | awk '$1 == "NEEDED" {print $2}'); do
	case $lib in
	libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.*) ;;
	*) echo "check_wheel: libcroupier.so needs $lib, which manylinux does not provide" >&2; exit 1 ;;
	esac
done

base=$("$py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv --without-pip "$tmp/venv"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$py" -m pip install --quiet --no-deps --no-index --target "$site" "$wheel"
packages=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$packages" >"$site/zz-packages-of-the-repository-venv.pth"

"$base" -m venv --without-pip "$tmp/bare"
bare=$("$tmp/bare/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$py" -m pip install --quiet --no-deps --no-index --target "$bare" "$wheel"
mkdir "$tmp/numpy-pyarrow"
for dep in "$packages"/{numpy,pyarrow}{,.libs,-*.dist-info}; do
	if [ -e "$dep" ]; then ln -s "$dep" "$tmp/numpy-pyarrow/"; fi
done
echo "$tmp/numpy-pyarrow" >"$bare/zz-numpy-pyarrow.pth"

export PATH="$tmp/venv/bin:/usr/bin:/bin"
unset PYTHONPATH CROUPIER_LIBRARY GOROOT
if command -v go >/dev/null; then
	echo "check_wheel: go is still on PATH: $(command -v go)" >&2
	exit 1
fi
cd "$tmp"
python -c '
import sys
import croupier
assert croupier.__file__.startswith(sys.argv[1]), f"croupier imported from {croupier.__file__}"
print("croupier", croupier.__version__, "from", croupier.__file__)
' "$site"
python "$repo/examples/demo.py" --data "$tmp/demo-data" --workers 2
python -m pytest -q -p no:cacheprovider --rootdir "$repo" -c "$repo/pyproject.toml" \
	"$repo/python/tests/test_table.py" "$repo/python/tests/test_permutation.py"
mkdir "$tmp/without-torch"
"$tmp/bare/bin/python" "$repo/python/tests/without_torch.py" "$tmp/without-torch"
