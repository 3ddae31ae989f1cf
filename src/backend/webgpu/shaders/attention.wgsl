// Causal attention, one workgroup per query (b, h, t): y[b, t, h*hd + d] =
// sum_{s <= pos+t} softmax_s(q . k_s * scale) v_s[d]. Keys and values come from the caches
// [B*nh, cap, hd] (cached = 1, after kv_write.wgsl) or from qkv itself (pos = 0). The keys
// are taken 256 at a time with an online softmax (running max and sum, the output rescaled;
// the weighted values summed by 256 / hd groups of threads at once),
// so no [T, S] scores are stored. hd <= 256.
struct P { T: u32, C: u32, hd: u32, nh: u32, cap: u32, pos: u32, use_buf: u32, pos0: u32,
           cached: u32, scale: f32, queries: u32, x0: u32, k0: u32, v0: u32, o0: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read> posb: array<u32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
var<workgroup> q: array<f32, 256>;
var<workgroup> pr: array<f32, 256>;
var<workgroup> vp: array<f32, 256>;  // the value groups' partial sums

// #include reduce

// Index of element d of key / value row s of head (b, h).
fn kv_index(b: u32, h: u32, s: u32, d: u32, part: u32) -> u32 {
  if (p.cached != 0u) { return ((b * p.nh + h) * p.cap + s) * p.hd + d; }
  return p.x0 + (b * p.T + s) * 3u * p.C + part * p.C + h * p.hd + d;
}

fn key(b: u32, h: u32, s: u32, d: u32) -> f32 {
  let i = kv_index(b, h, s, d, 1u);
  if (p.cached != 0u) { return kc[p.k0 + i]; }
  return qkv[i];
}

fn value(b: u32, h: u32, s: u32, d: u32) -> f32 {
  let i = kv_index(b, h, s, d, 2u);
  if (p.cached != 0u) { return vc[p.v0 + i]; }
  return qkv[i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3u, @builtin(num_workgroups) nw: vec3u,
        @builtin(local_invocation_index) l: u32) {
  let qi = w.x + w.y * nw.x;
  if (qi >= p.queries) { return; }
  let t = qi % p.T;
  let bh = qi / p.T;
  let h = bh % p.nh;
  let b = bh / p.nh;
  var pos = p.pos;
  if (p.use_buf != 0u) { pos = min(posb[p.pos0], p.cap - p.T); }
  let S = pos + t + 1u;  // keys visible to this query
  if (l < p.hd) { q[l] = qkv[p.x0 + (b * p.T + t) * 3u * p.C + h * p.hd + l]; }
  workgroupBarrier();
  var m = bitcast<f32>(0xff7fffffu);
  var sum = 0.0;
  var acc = 0.0;  // thread d < hd: output element d
  for (var c0 = 0u; c0 < S; c0 += 256u) {
    let s = c0 + l;
    var score = bitcast<f32>(0xff7fffffu);
    if (s < S) {
      // Two independent sums: two loads in flight per thread.
      var dot0 = 0.0;
      var dot1 = 0.0;
      var d = 0u;
      for (; d + 1u < p.hd; d += 2u) {
        dot0 += q[d] * key(b, h, s, d);
        dot1 += q[d + 1u] * key(b, h, s, d + 1u);
      }
      if (d < p.hd) { dot0 += q[d] * key(b, h, s, d); }
      score = (dot0 + dot1) * p.scale;
    }
    let m_new = max(m, reduce_max(l, score));
    var e = 0.0;
    if (s < S) { e = exp(score - m_new); }
    pr[l] = e;
    let chunk = reduce_sum(l, e);  // also orders pr's writes before the reads below
    let corr = exp(m - m_new);
    sum = sum * corr + chunk;
    // The weighted values: the 256 threads as 256 / hd groups of hd, group g taking keys
    // g, g + groups, ...; the groups' sums meet in shared memory.
    let groups = 256u / p.hd;
    let g = l / p.hd;
    let dv = l % p.hd;
    if (g < groups) {
      let n = min(256u, S - c0);
      var a0 = 0.0;
      var a1 = 0.0;
      var j = g;
      for (; j + groups < n; j += 2u * groups) {
        a0 += pr[j] * value(b, h, c0 + j, dv);
        a1 += pr[j + groups] * value(b, h, c0 + j + groups, dv);
      }
      if (j < n) { a0 += pr[j] * value(b, h, c0 + j, dv); }
      vp[l] = a0 + a1;
    }
    workgroupBarrier();
    if (l < p.hd) {
      var a = 0.0;
      for (var gi = 0u; gi < groups; gi++) { a += vp[gi * p.hd + l]; }
      acc = acc * corr + a;
    }
    m = m_new;
    workgroupBarrier();
  }
  if (l < p.hd) { o[p.o0 + (b * p.T + t) * p.C + h * p.hd + l] = acc / sum; }
}
