# The Vulkan backend's build and ctest entries, included by the top CMakeLists.txt (which
# includes every src/backend/*/backend.cmake). It appends to FORGE_BACKENDS,
# FORGE_BACKEND_SOURCES, FORGE_BACKEND_LIBS and FORGE_BACKEND_TEST_SOURCES, and defines
# forge_vulkan_tests(), called once forge_tests exists.
find_package(Vulkan QUIET)
find_program(GLSLC_EXECUTABLE glslc)
if(Vulkan_FOUND AND GLSLC_EXECUTABLE)
  set(FORGE_VULKAN_DEFAULT ON)
else()
  set(FORGE_VULKAN_DEFAULT OFF)
endif()
option(FORGE_VULKAN "Build the Vulkan backend (needs the Vulkan loader and glslc)" ${FORGE_VULKAN_DEFAULT})
if(FORGE_VULKAN AND NOT (Vulkan_FOUND AND GLSLC_EXECUTABLE))
  message(FATAL_ERROR "FORGE_VULKAN=ON needs the Vulkan loader and glslc (apt-get install libvulkan-dev glslc)")
endif()
message(STATUS "forge: Vulkan backend ${FORGE_VULKAN}")
if(NOT FORGE_VULKAN)
  return()
endif()

set(vk_dir ${CMAKE_CURRENT_LIST_DIR})
list(APPEND FORGE_BACKENDS vulkan)
file(GLOB vk_sources CONFIGURE_DEPENDS ${vk_dir}/*.cpp)
list(APPEND FORGE_BACKEND_SOURCES ${vk_sources})
list(APPEND FORGE_BACKEND_LIBS Vulkan::Vulkan)
file(GLOB vk_tests CONFIGURE_DEPENDS ${vk_dir}/tests/*.cpp)
list(APPEND FORGE_BACKEND_TEST_SOURCES ${vk_tests})

# Every shaders/<name>.comp -> <name>.spv (glslc) -> one generated .cpp of word arrays.
set(shader_dir ${vk_dir}/shaders)
file(GLOB FORGE_SHADERS CONFIGURE_DEPENDS ${shader_dir}/*.comp)
file(GLOB FORGE_SHADER_INCLUDES CONFIGURE_DEPENDS ${shader_dir}/*.glsl)
set(spv_dir ${CMAKE_CURRENT_BINARY_DIR}/spirv)
file(MAKE_DIRECTORY ${spv_dir})
set(spv_files "")
set(shader_names "")
foreach(shader ${FORGE_SHADERS})
  get_filename_component(name ${shader} NAME_WE)
  add_custom_command(
    OUTPUT ${spv_dir}/${name}.spv
    COMMAND ${GLSLC_EXECUTABLE} --target-env=vulkan1.1 -O -Werror -I ${shader_dir}
            -o ${spv_dir}/${name}.spv ${shader}
    DEPENDS ${shader} ${FORGE_SHADER_INCLUDES}
    COMMENT "glslc ${name}.comp" VERBATIM)
  list(APPEND spv_files ${spv_dir}/${name}.spv)
  list(APPEND shader_names ${name})
endforeach()
string(REPLACE ";" "," shader_names "${shader_names}")
set(embedded ${CMAKE_CURRENT_BINARY_DIR}/vulkan_shaders_spirv.cpp)
add_custom_command(
  OUTPUT ${embedded}
  COMMAND ${CMAKE_COMMAND} -DSPV_DIR=${spv_dir} -DNAMES=${shader_names} -DOUT=${embedded}
          -P ${vk_dir}/embed_spirv.cmake
  DEPENDS ${spv_files} ${vk_dir}/embed_spirv.cmake
  COMMENT "embedding SPIR-V" VERBATIM)
list(APPEND FORGE_BACKEND_SOURCES ${embedded})

# COST: ctest -j starts the costliest entries first (a fresh build has no timings of its
# own), so that lavapipe's long entries do not run alone at the end of a parallel pass.
function(forge_vulkan_tests)
  foreach(suite AllOps/OpReference AllOps/OpParity AllDevices/OpExact MatmulTiles/OpTiles
                BindingWindows/OpWindows EveryDevice/DeviceE2E)
    add_test(NAME ${suite}/vulkan COMMAND forge_tests "--gtest_filter=${suite}.*/vulkan_*")
    set_tests_properties(${suite}/vulkan PROPERTIES TIMEOUT 900 COST 20)
  endforeach()
  set_tests_properties(EveryDevice/DeviceE2E/vulkan PROPERTIES COST 50)
  # Once more with every host transfer through the staging buffer (discrete GPUs' path),
  # descriptor sets from pools (devices without VK_KHR_push_descriptor) and 4 bindings per
  # shader (Vulkan's minimum: attention's decode steps take the prefill kernel, and
  # attention_at and captured decode steps are Unsupported).
  add_test(NAME AllOps/OpReference/vulkan_staging
           COMMAND forge_tests
                   "--gtest_filter=AllOps/OpReference.*/vulkan_*:EveryDevice/DeviceE2E.*/vulkan_*:Vulkan.*-Vulkan.TrainingWithAWte*")
  set_tests_properties(AllOps/OpReference/vulkan_staging PROPERTIES TIMEOUT 900 COST 60
                       ENVIRONMENT "FORGE_VULKAN_STAGING=1;FORGE_VULKAN_PUSH_DESCRIPTORS=0;FORGE_VULKAN_MAX_BINDINGS=4")
  # Captured decode steps with the host's transfers through the staging buffer, as on a
  # discrete GPU (there a host write is a recorded copy, so the order of recording, writing
  # and submitting shows in the submit counts).
  add_test(NAME Vulkan/staging_capture
           COMMAND forge_tests
                   "--gtest_filter=EveryDevice/DeviceE2E.DecodeSteps*/vulkan_*:EveryDevice/DeviceE2E.GreedyDecoder*/vulkan_*:EveryDevice/DeviceE2E.Gpt2Greedy*/vulkan_*")
  set_tests_properties(Vulkan/staging_capture PROPERTIES TIMEOUT 900 COST 20
                       ENVIRONMENT "FORGE_VULKAN_STAGING=1")
  # gemv_chain (one dispatch for matmul_add_layernorm_matmul of one row; by default on
  # discrete GPUs only) forced on: its op cases and GPT-2's decode steps, which use it;
  # once as a GPU runs it (the second phase polls for the first) and once with every
  # second-phase workgroup computing the first phase itself (what one that gives up does).
  # The first also waits for its batches as on a GPU (polling the fence, then blocking).
  foreach(mode IN ITEMS 1 solo)
    set(spin "")
    if(mode STREQUAL "1")
      set(spin ";FORGE_VULKAN_SPIN_US=1000")
    endif()
    add_test(NAME AllOps/OpReference/vulkan_chain_${mode}
             COMMAND forge_tests
                     "--gtest_filter=AllOps/OpReference.*/vulkan_*matmul_add_layernorm_*:AllOps/OpParity.*/vulkan_*matmul_add_layernorm_*:EveryDevice/DeviceE2E.Gpt2*/vulkan_*:EveryDevice/DeviceE2E.DecodeSteps*/vulkan_*")
    set_tests_properties(AllOps/OpReference/vulkan_chain_${mode} PROPERTIES TIMEOUT 900 COST 20
                         ENVIRONMENT "FORGE_VULKAN_CHAIN=${mode}${spin}")
  endforeach()
  # The attention cases once more on the other prefill tile (lavapipe's default is small).
  add_test(NAME AllOps/OpReference/vulkan_attention_big
           COMMAND forge_tests
                   "--gtest_filter=AllOps/OpReference.*/vulkan_*_attention_*:Attention.*")
  set_tests_properties(AllOps/OpReference/vulkan_attention_big PROPERTIES TIMEOUT 900 COST 10
                       ENVIRONMENT "FORGE_VULKAN_ATTENTION_TILE=big")
endfunction()
