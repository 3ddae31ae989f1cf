// The parameters and bindings of the f32 products (matmul.wgsl, matmul_rows.wgsl).
struct P { M: u32, N: u32, K: u32, n_lo: u32, n_count: u32,
           a0: u32, sab: u32, sam: u32, sak: u32,
           w0: u32, swb: u32, swk: u32, swn: u32,
           o0: u32, bias0: u32, alpha: f32, flags: u32 }  // flags: 1 bias, 2 gelu, 4 accumulate
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
