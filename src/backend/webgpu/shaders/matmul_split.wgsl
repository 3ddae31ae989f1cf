// matmul.wgsl's product for a few rows of A (M <= 8, one batch) on a GPU: each workgroup of
// 256 threads computes cw = 8 columns, its threads split K into 32 slices, and the slices'
// partial sums meet in shared memory. The weight is read coalesced either way: with k
// contiguous (a transposed weight [N, K]: the LM head) the 32 threads of a column read
// neighbouring k; with n contiguous ([K, N]) the 8 threads of a slice read 8 neighbouring
// columns (32 bytes: one memory sector). Narrow columns give many workgroups (96 for
// GPT-2's [3072, 768]) and short loops.
struct P { M: u32, N: u32, K: u32, n_lo: u32, n_count: u32,
           a0: u32, sab: u32, sam: u32, sak: u32,
           w0: u32, swb: u32, swk: u32, swn: u32,
           o0: u32, bias0: u32, alpha: f32, flags: u32,  // flags: 1 bias, 2 gelu, 4 accumulate
           cw: u32, kcontig: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
var<workgroup> part: array<f32, 2048>;  // [slice][column][row]

// #include gelu_fn

// Row 0's a[k] times the weight's element k of the column starting at wb.
fn term(wb: u32, k: u32) -> f32 { return a[p.a0 + k * p.sak] * w[wb + k * p.swk]; }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let slices = 256u / p.cw;
  var c: u32;
  var s: u32;
  if (p.kcontig != 0u) { c = l / slices; s = l % slices; } else { c = l % p.cw; s = l / p.cw; }
  let nl = (wg.x + wg.y * nw.x) * p.cw + c;
  var acc: array<f32, 8>;
  for (var m = 0u; m < 8u; m++) { acc[m] = 0.0; }
  if (nl < p.n_count && p.M == 1u) {
    // One row (batch-1 decode): eight independent sums, so that each thread has eight loads
    // in flight rather than one (a thread's loop is bound by memory latency, not bandwidth).
    let wb = p.w0 + nl * p.swn;
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    var s4 = 0.0;
    var s5 = 0.0;
    var s6 = 0.0;
    var s7 = 0.0;
    var k = s;
    for (; k + 7u * slices < p.K; k += 8u * slices) {
      s0 += term(wb, k);
      s1 += term(wb, k + slices);
      s2 += term(wb, k + 2u * slices);
      s3 += term(wb, k + 3u * slices);
      s4 += term(wb, k + 4u * slices);
      s5 += term(wb, k + 5u * slices);
      s6 += term(wb, k + 6u * slices);
      s7 += term(wb, k + 7u * slices);
    }
    for (; k < p.K; k += slices) { s0 += term(wb, k); }
    acc[0] = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
  } else if (nl < p.n_count) {
    let wb = p.w0 + nl * p.swn;
    for (var k = s; k < p.K; k += slices) {
      let wv = w[wb + k * p.swk];
      for (var m = 0u; m < p.M; m++) { acc[m] += a[p.a0 + m * p.sam + k * p.sak] * wv; }
    }
  }
  for (var m = 0u; m < 8u; m++) { part[(s * p.cw + c) * 8u + m] = acc[m]; }
  workgroupBarrier();
  if (s != 0u || nl >= p.n_count) { return; }
  let n = p.n_lo + nl;
  for (var m = 0u; m < p.M; m++) {
    var sum = 0.0;
    for (var t = 0u; t < slices; t++) { sum += part[(t * p.cw + c) * 8u + m]; }
    var v = p.alpha * sum;
    if ((p.flags & 1u) != 0u) { v += bias[p.bias0 + n]; }
    if ((p.flags & 2u) != 0u) { v = gelu(v); }
    let oi = p.o0 + m * p.N + n;
    if ((p.flags & 4u) != 0u) { v += o[oi]; }
    o[oi] = v;
  }
}
