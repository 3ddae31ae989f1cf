// matmul_q8_0.wgsl's product for a few activation rows (rows <= 8): one thread per weight
// row n of the window, looping over its blocks for every activation row; no shared memory
// or barriers.
// #include matmul_q8_0_io

// #include gelu_fn

// #include q8_0

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let nl = g.x + g.y * nw.x * 64u;
  if (nl >= p.n_count) { return; }
  var acc: array<f32, 8>;
  for (var r = 0u; r < p.rows; r++) { acc[r] = 0.0; }
  for (var kb = 0u; kb < p.KB; kb++) {
    let block = p.w0 + (nl * p.KB + kb) * 34u;
    let dw = q8_scale(block);
    var q: array<i32, 32>;
    for (var k = 0u; k < 32u; k++) { q[k] = q8_value(block, k); }
    for (var r = 0u; r < p.rows; r++) {
      var isum = 0i;
      for (var j = 0u; j < 8u; j++) {
        let aw = bitcast<i32>(qa[(r * p.KB + kb) * 8u + j]);
        for (var e = 0u; e < 4u; e++) { isum += extractBits(aw, e * 8u, 8u) * q[j * 4u + e]; }
      }
      let da = bitcast<f32>(qa[p.rows * p.KB * 8u + r * p.KB + kb]);
      acc[r] += dw * da * f32(isum);
    }
  }
  let n = p.n_lo + nl;
  for (var r = 0u; r < p.rows; r++) {
    var v = p.alpha * acc[r];
    if ((p.flags & 1u) != 0u) { v += bias[p.bias0 + n]; }
    if ((p.flags & 2u) != 0u) { v = gelu(v); }
    let oi = p.o0 + r * p.N + n;
    if ((p.flags & 4u) != 0u) { v += o[oi]; }
    o[oi] = v;
  }
}
