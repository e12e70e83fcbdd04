"""The offline wheel of the seqtape Python package, with Debian's setuptools and no downloads:

    /usr/bin/python3 -m pip wheel --no-build-isolation --no-deps -w dist python/

The extension is the CMake target _seqtape: built in SEQTAPE_BUILD_DIR when that names a
configured build directory (the test does, to reuse its build), else in build-wheel/ at the top
of the repository (configured here: Release, no tests or benchmarks). The wheel is for this
machine's Python and Debian libraries (OpenBLAS, oneDNN, SentencePiece, ...), not manylinux.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    """Builds _seqtape with the project's CMake and puts it where setuptools packs it."""

    def build_extension(self, ext):
        build_dir = os.environ.get("SEQTAPE_BUILD_DIR") or os.path.join(ROOT, "build-wheel")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DSEQTAPE_BUILD_TESTS=OFF", "-DSEQTAPE_BUILD_BENCH=OFF",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("SEQTAPE_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_seqtape", "-j", jobs])
        built = glob.glob(os.path.join(build_dir, "python", "seqtape", "_seqtape*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _seqtape*.so in {build_dir}/python/seqtape, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    name="seqtape",
    version="0.1",
    description="seqtape from Python: tensors and autograd, training, batched decoding",
    packages=["seqtape"],
    package_dir={"seqtape": "seqtape"},  # pip runs this file from python/
    ext_modules=[Extension("seqtape._seqtape", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)
