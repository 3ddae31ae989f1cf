// Placeholder entry point until the CLI lands.
#include <cstdio>

#include "forge/forge.h"

int main() {
  std::printf("forge %s\n", forge::kVersion);
  return 0;
}
