"""pip install of the Python package forge, offline: Debian's pip and scikit-build
(python3-skbuild, installed by scripts/setup.sh) drive this repository's CMake build.

    python3 -m pip install --no-build-isolation --no-deps .            # a venv, or
    python3 -m pip install --no-build-isolation --no-deps --target DIR .

--no-build-isolation uses the Debian packages instead of fetching build tools from PyPI.
The package is the same as build/python/forge (CMakeLists.txt, "the Python package").
"""
from skbuild import setup

setup(
    name="forge",
    version="0.1.0",
    description="GPT-2 inference and training (forge, a small C++20 deep-learning engine)",
    packages=["forge"],
    package_dir={"forge": "python/forge"},
    python_requires=">=3.9",
    install_requires=["numpy"],
    cmake_args=["-DCMAKE_BUILD_TYPE=Release", "-DFORGE_TESTS=OFF", "-DFORGE_BENCH=OFF",
                "-DFORGE_OPENBLAS=OFF"],
    cmake_install_dir=".",
)
