# The browser module (wasm builds only): build-wasm/forge_web.js + forge_web.wasm, the engine
# behind the page of web/ (web/worker.js loads it in a Web Worker). No main: the worker calls
# the C API of forge_web.cpp. Model files are mounted from File/Blob objects (WORKERFS: read
# on demand, no copy into the JS heap).
if(NOT EMSCRIPTEN)
  return()
endif()
add_executable(forge_web ${CMAKE_CURRENT_LIST_DIR}/forge_web.cpp)
target_link_libraries(forge_web PRIVATE forge_lib nlohmann_json::nlohmann_json)
target_link_options(forge_web PRIVATE --no-entry -lworkerfs.js -sFORCE_FILESYSTEM=1
                    -sENVIRONMENT=worker -sALLOW_MEMORY_GROWTH=1 -sMAXIMUM_MEMORY=4GB
                    -sTOTAL_STACK=8MB -sMODULARIZE=1 -sEXPORT_NAME=createForgeWeb
                    "-sEXPORTED_RUNTIME_METHODS=['ccall','FS']")
if(FORGE_WEBGPU_JS)
  set_property(TARGET forge_web APPEND PROPERTY LINK_DEPENDS ${FORGE_WEBGPU_JS})
endif()
