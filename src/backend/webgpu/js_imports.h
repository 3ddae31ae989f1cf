// The JavaScript side of the WebGPU backend (library_webgpu.js): buffers and pipelines are
// u32 handles; sizes and offsets in bytes.
#pragma once

#include <cstdint>

extern "C" {
int forge_wgpu_available();
void forge_wgpu_adapter_name(char* dst, int cap);
void forge_wgpu_limits(double* dst);  // 9 values, library_webgpu.js
uint32_t forge_wgpu_buffer_create(uint32_t bytes);
void forge_wgpu_buffer_destroy(uint32_t id);
void forge_wgpu_buffer_write(uint32_t id, uint32_t offset, const void* src, uint32_t bytes);
void forge_wgpu_buffer_copy(uint32_t src, uint32_t src_offset, uint32_t dst, uint32_t dst_offset,
                            uint32_t bytes);
void forge_wgpu_buffer_fill_zero(uint32_t id, uint32_t offset, uint32_t bytes);
uint32_t forge_wgpu_pipeline(const char* wgsl);
void forge_wgpu_dispatch(uint32_t pipeline, const uint32_t* binds, uint32_t n,
                         const uint32_t* params, uint32_t words, uint32_t x, uint32_t y,
                         uint32_t z);
void forge_wgpu_flush();
uint32_t forge_wgpu_read_start(uint32_t id, uint32_t offset, uint32_t bytes);
int forge_wgpu_read_wait(uint32_t ticket, void* dst, uint32_t bytes);
int forge_wgpu_error(char* dst, int cap);
void forge_wgpu_counts(double* dst);  // submits, dispatches, reads
}
