# The WebGPU backend: wasm builds only (emscripten), where the host page or node test hands
# the module a GPUDevice. Appends to FORGE_BACKENDS, FORGE_BACKEND_SOURCES and
# FORGE_BACKEND_LIBS (the JavaScript glue and ASYNCIFY, for every program that links forge).
option(FORGE_WEBGPU "Build the WebGPU backend (wasm builds)" ON)
if(NOT EMSCRIPTEN OR NOT FORGE_WEBGPU)
  return()
endif()
set(wg_dir ${CMAKE_CURRENT_LIST_DIR})
list(APPEND FORGE_BACKENDS webgpu)
file(GLOB wg_sources CONFIGURE_DEPENDS ${wg_dir}/*.cpp)
list(APPEND FORGE_BACKEND_SOURCES ${wg_sources})

# Every shaders/<name>.wgsl as one entry of a generated table of raw strings.
file(GLOB wg_shaders CONFIGURE_DEPENDS ${wg_dir}/shaders/*.wgsl)
set(wg_inc "constexpr Source kSources[] = {\n")
foreach(shader ${wg_shaders})
  get_filename_component(name ${shader} NAME_WE)
  file(READ ${shader} text)
  string(APPEND wg_inc "    {\"${name}\", R\"WGSL(${text})WGSL\"},\n")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${shader})
endforeach()
string(APPEND wg_inc "};\n")
# file(GENERATE): written only when changed, and no @VAR@ substitution (WGSL has @ attributes).
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/generated/webgpu_shaders.inc CONTENT "${wg_inc}")

# Reads wait for mapAsync: forge_wgpu_read_wait is an asynchronous import (ASYNCIFY).
add_library(forge_webgpu_glue INTERFACE)
target_link_options(forge_webgpu_glue INTERFACE "--js-library=${wg_dir}/library_webgpu.js"
                    -sASYNCIFY "-sASYNCIFY_IMPORTS=['forge_wgpu_read_wait']" -sASYNCIFY_STACK_SIZE=65536)
list(APPEND FORGE_BACKEND_LIBS forge_webgpu_glue)
# Programs relink when the glue changes (CMake 3.25 has no INTERFACE_LINK_DEPENDS).
set(FORGE_WEBGPU_JS ${wg_dir}/library_webgpu.js)
