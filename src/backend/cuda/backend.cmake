# The CUDA backend's build, included by the top CMakeLists.txt (which includes every
# src/backend/*/backend.cmake). Nothing of CUDA is needed to build it: the driver, NVRTC and
# cuBLASLt are loaded at run time, and the kernels (kernels/*.cu) are embedded as source and
# compiled by NVRTC for the GPU at hand (docs/ARCHITECTURE.md, "The CUDA backend"). Without
# a driver the backend lists no device, and its tests skip.
option(FORGE_CUDA "Build the CUDA backend (it loads the NVIDIA driver at run time)" ON)
if(EMSCRIPTEN OR NOT FORGE_CUDA OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  return()
endif()
set(cuda_dir ${CMAKE_CURRENT_LIST_DIR})
list(APPEND FORGE_BACKENDS cuda)
file(GLOB cuda_sources CONFIGURE_DEPENDS ${cuda_dir}/*.cpp)
list(APPEND FORGE_BACKEND_SOURCES ${cuda_sources})
list(APPEND FORGE_BACKEND_LIBS ${CMAKE_DL_LIBS})
file(GLOB cuda_tests CONFIGURE_DEPENDS ${cuda_dir}/tests/*.cpp)
list(APPEND FORGE_BACKEND_TEST_SOURCES ${cuda_tests})

file(GLOB cuda_kernels CONFIGURE_DEPENDS ${cuda_dir}/kernels/*.cu ${cuda_dir}/kernels/*.cuh)
set(cuda_embedded ${CMAKE_CURRENT_BINARY_DIR}/cuda_kernels_source.cpp)
add_custom_command(
  OUTPUT ${cuda_embedded}
  COMMAND ${CMAKE_COMMAND} -DKERNEL_DIR=${cuda_dir}/kernels -DOUT=${cuda_embedded}
          -P ${cuda_dir}/embed_kernels.cmake
  DEPENDS ${cuda_kernels} ${cuda_dir}/embed_kernels.cmake
  COMMENT "embedding the CUDA kernels' source" VERBATIM)
list(APPEND FORGE_BACKEND_SOURCES ${cuda_embedded})

# No ctest entries for the device-parameterized suites on CUDA: CI has no GPU, and the test
# binary refuses a filter that matches nothing. On the GPU machine tools/gpu_tests.sh runs them.
