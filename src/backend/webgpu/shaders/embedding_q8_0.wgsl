// embedding.wgsl with a Q8_0 table: t0 is the window's first byte, rows of C / 32 blocks.
struct P { n: u32, C: u32, first: u32, rows: u32, ids0: u32, t0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> wq: array<u32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

// #include q8_0

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n * p.C) { return; }
  let r = i / p.C;
  let c = i % p.C;
  let id = ids[p.ids0 + r];
  if (id < p.first || id - p.first >= p.rows) { return; }
  let block = p.t0 + ((id - p.first) * (p.C / 32u) + c / 32u) * 34u;
  o[p.o0 + i] = q8_scale(block) * f32(q8_value(block, c % 32u));
}
