// matmul.wgsl's product for a few rows of A (M <= 8, one batch): one thread per output
// column n of the window, looping over K for every row; no shared memory or barriers. A
// weight stored [K, N] is read coalesced (neighbouring threads, neighbouring columns); one
// stored [N, K] (transposed: the LM head) streams a row per thread.
struct P { M: u32, N: u32, K: u32, n_lo: u32, n_count: u32,
           a0: u32, sab: u32, sam: u32, sak: u32,
           w0: u32, swb: u32, swk: u32, swn: u32,
           o0: u32, bias0: u32, alpha: f32, flags: u32 }  // flags: 1 bias, 2 gelu, 4 accumulate
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

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
