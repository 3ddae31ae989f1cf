// out = gelu(x) elementwise (gelu_fn.wgsl).
struct P { n: u32, x0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

// #include gelu_fn

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  o[p.o0 + i] = gelu(x[p.x0 + i]);
}
