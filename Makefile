# Convenience wrapper; the scripts are the source of truth (a fresh machine may lack make).
.PHONY: all build demo test test-release format format-check

all: build

build:
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFORGE_WERROR=ON
	cmake --build build -j

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# Release pass only: a quicker local check.
test-release:
	FORGE_SKIP_ASAN=1 FORGE_SKIP_TSAN=1 bash scripts/test.sh

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

format-check:
	git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run --Werror
