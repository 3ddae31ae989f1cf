// Row softmax, one workgroup per row of S columns. causal: row r is row (r % T) of its
// [T, S] matrix and sees columns j <= (r % T) + offset; the others are exact zeros.
struct P { rows: u32, S: u32, T: u32, causal: u32, offset: u32, x0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

// #include reduce

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let row = w.x + w.y * nw.x;
  if (row >= p.rows) { return; }  // uniform per workgroup
  var seen = p.S;
  if (p.causal != 0u) { seen = min(p.S, row % p.T + p.offset + 1u); }
  let xb = p.x0 + row * p.S;
  let ob = p.o0 + row * p.S;
  var m = bitcast<f32>(0xff7fffffu);
  for (var j = l; j < seen; j += 256u) { m = max(m, x[xb + j]); }
  m = reduce_max(l, m);
  var s = 0.0;
  for (var j = l; j < seen; j += 256u) { s += exp(x[xb + j] - m); }
  s = reduce_sum(l, s);
  let inv = 1.0 / s;
  for (var j = l; j < p.S; j += 256u) {
    if (j < seen) { o[ob + j] = exp(x[xb + j] - m) * inv; } else { o[ob + j] = 0.0; }
  }
}
