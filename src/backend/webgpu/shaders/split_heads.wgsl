// out[b*nh + h, t, d] = qkv[b, t, part*C + h*hd + d]: one part (q, k or v) in head layout.
struct P { n: u32, T: u32, C: u32, hd: u32, nh: u32, part: u32, x0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  let d = i % p.hd;
  let t = (i / p.hd) % p.T;
  let bh = i / (p.hd * p.T);
  let h = bh % p.nh;
  let b = bh / p.nh;
  o[p.o0 + i] = x[p.x0 + (b * p.T + t) * 3u * p.C + p.part * p.C + h * p.hd + d];
}
