// out[b, t, h*hd + d] = x[b*nh + h, t, d]: heads back to rows of C.
struct P { n: u32, T: u32, C: u32, hd: u32, nh: u32, x0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  let c = i % p.C;
  let t = (i / p.C) % p.T;
  let b = i / (p.C * p.T);
  let h = c / p.hd;
  let d = c % p.hd;
  o[p.o0 + i] = x[p.x0 + ((b * p.nh + h) * p.T + t) * p.hd + d];
}
