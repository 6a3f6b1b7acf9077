"""Builds tracecorr._tracecorr with CMake (only Debian-packaged tools: setuptools, cmake, ninja, pybind11-dev).

build_ext configures the repository with -DTRACECORR_TESTS=OFF, builds only the
`tracecorr_python` target and copies the module into the package. Metadata lives
in pyproject.toml, except the version (CMakeLists.txt).

Environment:
  TRACECORR_CMAKE_BUILD_DIR  reuse this CMake build directory (it is built, not
                             reconfigured); default: build-pip/cmake, configured here
  TRACECORR_PREBUILT_EXTENSION=PATH
                             install this already built _tracecorr module instead of
                             running CMake (it must match this interpreter's EXT_SUFFIX)
  TRACECORR_BPF=OFF          build without the BPF sampler
  CMAKE_BUILD_PARALLEL_LEVEL jobs for the build
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD_BASE = "build-pip"  # not build/: that is the CMake build directory by convention


class CMakeExtension(Extension):
    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        prebuilt = os.environ.get("TRACECORR_PREBUILT_EXTENSION")
        if prebuilt:
            if not prebuilt.endswith(sysconfig.get_config_var("EXT_SUFFIX")):
                raise RuntimeError(f"{prebuilt} is not a module for {sys.executable} "
                                   f"(suffix {sysconfig.get_config_var('EXT_SUFFIX')})")
            shutil.copy2(prebuilt, dest)
            return
        reuse = os.environ.get("TRACECORR_CMAKE_BUILD_DIR")
        build_dir = Path(reuse).resolve() if reuse else ROOT / BUILD_BASE / "cmake"
        if not (build_dir / "CMakeCache.txt").exists():
            if reuse:
                raise RuntimeError(f"TRACECORR_CMAKE_BUILD_DIR={reuse} is not a configured CMake build directory")
            build_dir.mkdir(parents=True, exist_ok=True)
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            self.spawn(["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
                        f"-DPython3_EXECUTABLE={sys.executable}",
                        "-DCMAKE_BUILD_TYPE=Release",
                        "-DTRACECORR_TESTS=OFF",
                        "-DTRACECORR_PYTHON=ON",
                        "-DTRACECORR_ARM64_FIXTURES=OFF",
                        f"-DTRACECORR_BPF={os.environ.get('TRACECORR_BPF', 'ON')}",
                        f"-DTRACECORR_PYTHON_OUTPUT_DIR={build_dir / 'python-module'}"])
        self.spawn(["cmake", "--build", str(build_dir), "--target", ext.target])

        cache = (build_dir / "CMakeCache.txt").read_text()
        m = re.search(r"^TRACECORR_PYTHON_OUTPUT_DIR:PATH=(.*)$", cache, re.M)
        if not m:
            raise RuntimeError(f"{build_dir}: the Python extension is not configured (pybind11-dev, python3-dev?)")
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = Path(m.group(1)) / ("_tracecorr" + suffix)
        if not built.exists():
            raise RuntimeError(f"{built} was not built (is {build_dir} configured for {sys.executable}?)")
        shutil.copy2(built, dest)


def project_version():
    """The version's one home: project(tracecorr VERSION x.y.z) in CMakeLists.txt."""
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(tracecorr VERSION ([0-9.]+)", text)
    if not match:
        raise RuntimeError("CMakeLists.txt: no project(tracecorr VERSION ...)")
    return match.group(1)


setup(
    version=project_version(),
    ext_modules=[CMakeExtension("tracecorr._tracecorr", "tracecorr_python")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}},
    zip_safe=False,
)
