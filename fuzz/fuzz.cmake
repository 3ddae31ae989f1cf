# The libFuzzer harnesses (FORGE_FUZZ=ON with clang; docs/RELIABILITY.md): one executable per
# fuzz/fuzz_<name>.cpp, each linked with libFuzzer's main, and fuzz_seeds (make_seeds.cpp),
# which writes the valid files that the corpora in fuzz/corpus/ grew from.
add_library(forge_fuzz_util STATIC ${PROJECT_SOURCE_DIR}/fuzz/harness_util.cpp)
target_include_directories(forge_fuzz_util PUBLIC ${PROJECT_SOURCE_DIR}/fuzz)
target_link_libraries(forge_fuzz_util PUBLIC forge_cli)
# Where the text harnesses find GPT-2's tokenizer (scripts/fetch_tokenizer.sh puts it there).
target_compile_definitions(forge_fuzz_util PUBLIC FORGE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
file(GLOB FORGE_FUZZ_HARNESSES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/fuzz/fuzz_*.cpp)
set(FORGE_FUZZ_TARGETS "")
foreach(src ${FORGE_FUZZ_HARNESSES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE forge_fuzz_util)
  if(name STREQUAL "fuzz_serve_request" AND NOT TARGET forge_serve)
    message(FATAL_ERROR "fuzz_serve_request needs forge serve (cpp-httplib: scripts/setup.sh)")
  endif()
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  list(APPEND FORGE_FUZZ_TARGETS ${name})
endforeach()
add_executable(fuzz_seeds ${PROJECT_SOURCE_DIR}/fuzz/make_seeds.cpp)
target_link_libraries(fuzz_seeds PRIVATE forge_fuzz_util)
# `cmake --build <dir> --target fuzz` builds every harness and the seed writer.
add_custom_target(fuzz DEPENDS ${FORGE_FUZZ_TARGETS} fuzz_seeds)
