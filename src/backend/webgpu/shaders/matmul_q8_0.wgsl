// out[r, n] = [out +] [gelu](alpha * sum_kb (d_w * d_a) * sum_k q_a q_w + bias[n]) for the
// rows r of the activations (rounded by quantize_rows.wgsl into qa) and the weight rows
// n in [n_lo, n_lo + n_count) of this dispatch's window (Q8_0 blocks from byte w0, rows of
// KB blocks). 8 outputs per workgroup of 256 threads, 32 threads per output.
// #include matmul_q8_0_io
var<workgroup> red: array<f32, 256>;

// #include gelu_fn

// #include q8_0

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let slot = (wg.x + wg.y * nw.x) * 8u + l / 32u;  // output index within r-major order
  let lane = l % 32u;
  let r = slot / p.n_count;
  let nl = slot % p.n_count;
  var acc = 0.0;
  if (r < p.rows) {
    for (var kb = lane; kb < p.KB; kb += 32u) {
      let block = p.w0 + (nl * p.KB + kb) * 34u;
      var isum = 0i;
      for (var j = 0u; j < 8u; j++) {
        let aw = bitcast<i32>(qa[(r * p.KB + kb) * 8u + j]);
        for (var e = 0u; e < 4u; e++) {
          isum += extractBits(aw, e * 8u, 8u) * q8_value(block, j * 4u + e);
        }
      }
      let da = bitcast<f32>(qa[p.rows * p.KB * 8u + r * p.KB + kb]);
      acc += q8_scale(block) * da * f32(isum);
    }
  }
  red[l] = acc;
  workgroupBarrier();
  for (var s = 16u; s > 0u; s >>= 1u) {
    if (lane < s) { red[l] = red[l] + red[l + s]; }
    workgroupBarrier();
  }
  if (lane != 0u || r >= p.rows) { return; }
  let n = p.n_lo + nl;
  var v = p.alpha * red[l];
  if ((p.flags & 1u) != 0u) { v += bias[p.bias0 + n]; }
  if ((p.flags & 2u) != 0u) { v = gelu(v); }
  let oi = p.o0 + r * p.N + n;
  if ((p.flags & 4u) != 0u) { v += o[oi]; }
  o[oi] = v;
}
