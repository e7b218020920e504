"""Builds ropekit's extension with the project's own CMake (the parent folder) and installs the package.

The C++ library and the extension are configured in ../build/python-wheel (Release, tests and examples
off) and the target `ropekit_python` is built there; the compiled module is copied into the wheel.
ROPEKIT_CMAKE_BUILD_DIR=DIR reuses an already configured build tree instead (the test suite points it at
build/release, so the install test compiles nothing new).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent
# The version: CMakeLists.txt's project(ropekit VERSION …), which the C API, the CLI and the module read too.
VERSION = re.search(r"project\(ropekit VERSION ([0-9]+\.[0-9]+\.[0-9]+)", (ROOT / "CMakeLists.txt").read_text())[1]


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        given = os.environ.get("ROPEKIT_CMAKE_BUILD_DIR")
        build_dir = (ROOT / given).resolve() if given else ROOT / "build" / "python-wheel"  # relative: to the repository
        if not given:
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", "-DROPEKIT_BUILD_PYTHON=ON",
                            "-DROPEKIT_BUILD_TESTS=OFF", "-DROPEKIT_BUILD_EXAMPLES=OFF",
                            f"-DPython_EXECUTABLE={sys.executable}"], check=True)
        elif not (build_dir / "CMakeCache.txt").exists():
            raise SystemExit(f"ROPEKIT_CMAKE_BUILD_DIR={build_dir}: not a configured CMake build tree")
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "ropekit_python"], check=True)
        built = sorted((build_dir / "python" / "ropekit").glob("_ropekit*.so"))
        if not built:
            raise SystemExit(f"{build_dir}/python/ropekit: no _ropekit*.so after the build")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)


setup(version=VERSION, ext_modules=[Extension("ropekit._ropekit", sources=[])], cmdclass={"build_ext": CMakeBuild})
