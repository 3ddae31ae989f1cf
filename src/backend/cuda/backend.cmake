# The CUDA backend's build, included by the top CMakeLists.txt (which includes every
# src/backend/*/backend.cmake). Nothing of CUDA is needed to build it: the driver (and, as
# the backend grows, NVRTC and cuBLASLt) is loaded at run time (docs/CUDA_PLAN.md says why).
# So far it holds the run-time loading and the driver's GPU list, with their tests; it joins
# FORGE_BACKENDS (and so the registry) once its kernels exist.
option(FORGE_CUDA "Build the CUDA backend's code (it loads the NVIDIA driver at run time)" ON)
if(EMSCRIPTEN OR NOT FORGE_CUDA OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  return()
endif()
set(cuda_dir ${CMAKE_CURRENT_LIST_DIR})
file(GLOB cuda_sources CONFIGURE_DEPENDS ${cuda_dir}/*.cpp)
list(APPEND FORGE_BACKEND_SOURCES ${cuda_sources})
list(APPEND FORGE_BACKEND_LIBS ${CMAKE_DL_LIBS})
file(GLOB cuda_tests CONFIGURE_DEPENDS ${cuda_dir}/tests/*.cpp)
list(APPEND FORGE_BACKEND_TEST_SOURCES ${cuda_tests})
