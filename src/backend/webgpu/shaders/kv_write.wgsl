// The keys and values of T new positions into rows pos..pos+T-1 of the caches
// [B*nh, cap, hd]. pos is p.pos, or (use_buf) posb[pos0] clamped to cap - T.
struct P { n: u32, T: u32, C: u32, hd: u32, nh: u32, cap: u32, pos: u32, use_buf: u32, pos0: u32,
           x0: u32, k0: u32, v0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> kc: array<f32>;
@group(0) @binding(3) var<storage, read_write> vc: array<f32>;
@group(0) @binding(4) var<storage, read> posb: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n) { return; }
  var pos = p.pos;
  if (p.use_buf != 0u) { pos = min(posb[p.pos0], p.cap - p.T); }
  let d = i % p.hd;
  let t = (i / p.hd) % p.T;
  let bh = i / (p.hd * p.T);
  let h = bh % p.nh;
  let b = bh / p.nh;
  let src = p.x0 + (b * p.T + t) * 3u * p.C + h * p.hd + d;
  let dst = (bh * p.cap + pos + t) * p.hd + d;
  kc[p.k0 + dst] = qkv[src + p.C];
  vc[p.v0 + dst] = qkv[src + 2u * p.C];
}
