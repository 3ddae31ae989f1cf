// The activations of a Q8_0 product rounded as the CPU (and llama.cpp) round them: per block
// of 32 of a row, d = max|x| / 127, q = x * (1 / d) rounded half to even, clamped to
// [-127, 127] (d = 0: q = 0). Out: q packed 4 per u32 at qa[(row*KB + kb)*8 ..], and d as
// f32 bits after all of them, at qa[rows*KB*8 + row*KB + kb]. One thread per block.
struct P { rows: u32, KB: u32, a0: u32, sam: u32, sak: u32, batch_rows: u32, sab: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> qa: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) nw: vec3u) {
  let i = g.x + g.y * nw.x * 64u;
  if (i >= p.rows * p.KB) { return; }
  let row = i / p.KB;
  let kb = i % p.KB;
  // row = b * batch_rows + m
  let base = p.a0 + (row / p.batch_rows) * p.sab + (row % p.batch_rows) * p.sam + kb * 32u * p.sak;
  var amax = 0.0;
  for (var k = 0u; k < 32u; k++) { amax = max(amax, abs(a[base + k * p.sak])); }
  let d = amax / 127.0;
  var inv = 0.0;
  if (d > 0.0) { inv = 1.0 / d; }
  for (var j = 0u; j < 8u; j++) {
    var word = 0u;
    for (var e = 0u; e < 4u; e++) {
      var v = round(a[base + (j * 4u + e) * p.sak] * inv);
      if (!(v >= -127.0)) { v = -127.0; }
      if (v > 127.0) { v = 127.0; }
      word |= (u32(i32(v)) & 0xffu) << (e * 8u);
    }
    qa[i * 8u + j] = word;
  }
  qa[p.rows * p.KB * 8u + i] = bitcast<u32>(d);
}
