// out[i] = a[i] + b[i % nb]: b has a's shape (nb = n) or is one row (nb = C).
struct P { n: u32, nb: u32, a0: u32, b0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  o[p.o0 + i] = a[p.a0 + i] + b[p.b0 + i % p.nb];
}
