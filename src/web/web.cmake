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
# The threads build (preset wasm-threads) makes build-wasm-mt/forge_web_mt.js, .wasm and
# .worker.js: the page loads it on the CPU when it is cross-origin isolated. Its pool of Web
# Workers is made when the module starts (Module.forgeWorkers of them, at least one), and
# FORGE_NUM_THREADS reaches the engine through ENV.
if(FORGE_WASM_THREADS)
  set_target_properties(forge_web PROPERTIES OUTPUT_NAME forge_web_mt)
  target_link_options(forge_web PRIVATE -sEXPORT_NAME=createForgeWebThreads
                      "-sPTHREAD_POOL_SIZE=Math.max(1,Module.forgeWorkers|0)"
                      "-sEXPORTED_RUNTIME_METHODS=['ccall','FS','ENV']")
endif()
if(FORGE_WEBGPU_JS)
  set_property(TARGET forge_web APPEND PROPERTY LINK_DEPENDS ${FORGE_WEBGPU_JS})
endif()
