// The parameters and bindings of the Q8_0 products (matmul_q8_0.wgsl,
// matmul_q8_0_rows.wgsl): qa holds the rounded activations (quantize_rows.wgsl).
struct P { rows: u32, N: u32, KB: u32, n_lo: u32, n_count: u32, w0: u32, o0: u32, bias0: u32,
           alpha: f32, flags: u32 }  // flags: 1 bias, 2 gelu, 4 accumulate
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> qa: array<u32>;
@group(0) @binding(2) var<storage, read> wq: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
