"""Build hooks: compile the Go core into the package as ``libcroupier.so``.

All metadata lives in pyproject.toml. ``build_py`` (run by ``pip install``,
``pip install -e .`` and wheel builds) first runs ``build_go``, which calls the
local Go toolchain. Set ``CROUPIER_SKIP_GO_BUILD=1`` when the library is already
built (``make`` builds it itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from setuptools import Command, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
LIBRARY = Path("python") / "croupier" / "libcroupier.so"


class BuildGo(Command):
    """Build the Go shared library with ``go build -buildmode=c-shared``."""

    description = "build python/croupier/libcroupier.so from ./cabi with the Go toolchain"
    user_options: ClassVar[list[tuple[str, str | None, str]]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        if os.environ.get("CROUPIER_SKIP_GO_BUILD") == "1":
            if not (ROOT / LIBRARY).exists():
                raise SystemExit(f"CROUPIER_SKIP_GO_BUILD=1 but {LIBRARY} does not exist")
            return
        go = shutil.which("go")
        if go is None:
            raise SystemExit("building croupier needs the Go toolchain (`go`) on PATH")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", str(LIBRARY), "./cabi"]
        print("running", " ".join(cmd))
        subprocess.run(cmd, cwd=ROOT, check=True)


class BuildPyWithGo(build_py):
    """``build_py`` that builds the Go library first, so it ships as package data."""

    def run(self) -> None:
        self.run_command("build_go")
        super().run()


class BinaryDistribution(Distribution):
    """The package holds a native library: wheels are platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


def manylinux_platform(library: Path, platform: str) -> str:
    """The manylinux tag (PEP 600) of a wheel for ``linux_<arch>`` holding ``library``.

    libcroupier.so links only libc (the Go runtime, and libzstd built in statically), so
    the newest glibc symbol version it uses is the whole of its requirement:
    ``manylinux_2_<minor>_<arch>``, installable on any Linux with that glibc or newer.
    ``make test-wheel`` checks that the library needs no other shared library.
    """
    arch = platform.removeprefix("linux_")
    found = re.findall(rb"GLIBC_(\d+)\.(\d+)", library.read_bytes())
    versions = {(int(a), int(b)) for a, b in found}
    if not versions:
        return platform
    major, minor = max(versions)
    return f"manylinux_{major}_{minor}_{arch}"


class PlatformWheel(bdist_wheel):
    """Tag wheels ``py3-none-manylinux_2_<minor>_<arch>``: the library is loaded with
    ctypes, not as a CPython extension, so one wheel serves every Python version on a
    platform, and it needs nothing of the system but glibc (see manylinux_platform)."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        if platform.startswith("linux_"):
            platform = manylinux_platform(ROOT / LIBRARY, platform)
        return "py3", "none", platform


setup(
    cmdclass={"build_go": BuildGo, "build_py": BuildPyWithGo, "bdist_wheel": PlatformWheel},
    distclass=BinaryDistribution,
)
