// The index of each row's largest element: the first of equal maxima, NaN counted as -inf
// (a row of only -inf or NaN gives 0). One workgroup per row.
struct P { rows: u32, V: u32, x0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<u32>;
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

// NaN compares false both ways; as a u32 pattern it has all exponent bits and a mantissa.
fn is_nan(v: f32) -> bool { let b = bitcast<u32>(v); return (b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0u; }

// Whether v (at a later index) replaces the best so far: NaN and -inf are never picked.
fn takes(v: f32, bv: f32, bi: u32) -> bool {
  if (is_nan(v) || bitcast<u32>(v) == 0xff800000u) { return false; }
  return bi == 0xffffffffu || v > bv;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let row = w.x + w.y * nw.x;
  if (row >= p.rows) { return; }
  let xb = p.x0 + row * p.V;
  var bv = bitcast<f32>(0xff7fffffu);
  var bi = 0xffffffffu;  // none yet
  // A thread's elements in increasing order (so the first of equal maxima stays), four
  // loads issued at a time.
  var j = l;
  for (; j + 768u < p.V; j += 1024u) {
    let v0 = x[xb + j];
    let v1 = x[xb + j + 256u];
    let v2 = x[xb + j + 512u];
    let v3 = x[xb + j + 768u];
    if (takes(v0, bv, bi)) { bv = v0; bi = j; }
    if (takes(v1, bv, bi)) { bv = v1; bi = j + 256u; }
    if (takes(v2, bv, bi)) { bv = v2; bi = j + 512u; }
    if (takes(v3, bv, bi)) { bv = v3; bi = j + 768u; }
  }
  for (; j < p.V; j += 256u) {
    let v = x[xb + j];
    if (takes(v, bv, bi)) { bv = v; bi = j; }
  }
  best_v[l] = bv;
  best_i[l] = bi;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (l < s) {
      let ov = best_v[l + s];
      let oi = best_i[l + s];
      let mi = best_i[l];
      if (oi != 0xffffffffu && (mi == 0xffffffffu || ov > best_v[l] || (ov == best_v[l] && oi < mi))) {
        best_v[l] = ov;
        best_i[l] = oi;
      }
    }
    workgroupBarrier();
  }
  if (l == 0u) { o[p.o0 + row] = select(best_i[0], 0u, best_i[0] == 0xffffffffu); }
}
