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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let row = w.x + w.y * nw.x;
  if (row >= p.rows) { return; }
  let xb = p.x0 + row * p.V;
  var bv = bitcast<f32>(0xff7fffffu);
  var bi = 0xffffffffu;  // none yet
  for (var j = l; j < p.V; j += 256u) {
    let v = x[xb + j];
    if (is_nan(v) || bitcast<u32>(v) == 0xff800000u) { continue; }  // NaN and -inf: never picked
    if (bi == 0xffffffffu || v > bv) { bv = v; bi = j; }
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
