// matmul.wgsl's product for a few rows of A (M <= 8, one batch): one thread per output
// column n of the window, looping over K for every row; no shared memory or barriers. A
// weight stored [K, N] is read coalesced (neighbouring threads, neighbouring columns); one
// stored [N, K] (transposed: the LM head) streams a row per thread.
// #include matmul_io

// #include gelu_fn

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let nl = g.x + g.y * nw.x * 64u;  // column within the window
  if (nl >= p.n_count) { return; }
  var acc: array<f32, 8>;
  for (var m = 0u; m < p.M; m++) { acc[m] = 0.0; }
  let wb = p.w0 + nl * p.swn;
  for (var k = 0u; k < p.K; k++) {
    let wv = w[wb + k * p.swk];
    for (var m = 0u; m < p.M; m++) { acc[m] += a[p.a0 + m * p.sam + k * p.sak] * wv; }
  }
  let n = p.n_lo + nl;
  for (var m = 0u; m < p.M; m++) {
    var v = p.alpha * acc[m];
    if ((p.flags & 1u) != 0u) { v += bias[p.bias0 + n]; }
    if ((p.flags & 2u) != 0u) { v = gelu(v); }
    let oi = p.o0 + m * p.N + n;
    if ((p.flags & 4u) != 0u) { v += o[oi]; }
    o[oi] = v;
  }
}
