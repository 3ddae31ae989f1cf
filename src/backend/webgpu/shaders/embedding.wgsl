// out[r, c] = table[ids[r], c] for the ids inside this dispatch's window of table rows
// [first, first + rows) (a table larger than one binding takes one dispatch per window);
// other ids' rows are left to the other windows (an id past the table: unwritten).
struct P { n: u32, C: u32, first: u32, rows: u32, ids0: u32, t0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 256u;
  if (i >= p.n * p.C) { return; }
  let r = i / p.C;
  let c = i % p.C;
  let id = ids[p.ids0 + r];
  if (id < p.first || id - p.first >= p.rows) { return; }
  o[p.o0 + i] = table[p.t0 + (id - p.first) * p.C + c];
}
