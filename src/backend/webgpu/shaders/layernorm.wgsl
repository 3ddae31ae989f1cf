// LayerNorm of each row of C: (x - mean) / sqrt(var + eps) * gamma + beta, biased variance,
// two passes over the row (mean, then the squared deviations). One workgroup per row.
struct P { rows: u32, C: u32, eps: f32, x0: u32, g0: u32, b0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

// #include reduce

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let row = w.x + w.y * nw.x;
  if (row >= p.rows) { return; }
  let xb = p.x0 + row * p.C;
  let ob = p.o0 + row * p.C;
  var s = 0.0;
  for (var j = l; j < p.C; j += 256u) { s += x[xb + j]; }
  let mean = reduce_sum(l, s) / f32(p.C);
  var q = 0.0;
  for (var j = l; j < p.C; j += 256u) { let d = x[xb + j] - mean; q += d * d; }
  let rstd = 1.0 / sqrt(reduce_sum(l, q) / f32(p.C) + p.eps);
  for (var j = l; j < p.C; j += 256u) {
    o[ob + j] = (x[xb + j] - mean) * rstd * gamma[p.g0 + j] + beta[p.b0 + j];
  }
}
