// out[b, m, n] = [out +] [gelu](alpha * sum_k A[b, m, k] B[b, k, n] + bias[n]) for the
// columns n of this dispatch's window [n_lo, n_lo + n_count), with
//   A[b, m, k] = a[a0 + b*sab + m*sam + k*sak],
//   B[b, k, n] = w[w0 + b*swb + k*swk + (n - n_lo)*swn]
// (transposes are strides; a weight larger than one binding takes one dispatch per window
// of its rows). 16 x 16 threads, one output each, 16 x 16 tiles of A and B in shared memory.
// #include matmul_io
var<workgroup> ta: array<array<f32, 17>, 16>;
var<workgroup> tb: array<array<f32, 17>, 16>;

// #include gelu_fn

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let b = wg.z;
  let m = wg.y * 16u + lid.y;
  let nl = wg.x * 16u + lid.x;  // column within the window
  var acc = 0.0;
  for (var k0 = 0u; k0 < p.K; k0 += 16u) {
    // ta[row][kk] = A[m-tile row, k0 + kk]; tb[kk][col] = B[k0 + kk, n-tile col]
    let am = wg.y * 16u + lid.y;
    let ak = k0 + lid.x;
    ta[lid.y][lid.x] = select(0.0, a[p.a0 + b * p.sab + am * p.sam + ak * p.sak], am < p.M && ak < p.K);
    let bk = k0 + lid.y;
    let bn = wg.x * 16u + lid.x;
    tb[lid.y][lid.x] = select(0.0, w[p.w0 + b * p.swb + bk * p.swk + bn * p.swn], bk < p.K && bn < p.n_count);
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) { acc += ta[lid.y][kk] * tb[kk][lid.x]; }
    workgroupBarrier();
  }
  if (m >= p.M || nl >= p.n_count) { return; }
  let n = p.n_lo + nl;
  var v = p.alpha * acc;
  if ((p.flags & 1u) != 0u) { v += bias[p.bias0 + n]; }
  if ((p.flags & 2u) != 0u) { v = gelu(v); }
  let oi = p.o0 + (b * p.M + m) * p.N + n;
  if ((p.flags & 4u) != 0u) { v += o[oi]; }
  o[oi] = v;
}
