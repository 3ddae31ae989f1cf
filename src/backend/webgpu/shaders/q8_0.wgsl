// Q8_0 blocks read in place from a u32 array `wq` (included by the shaders that use it):
// a block is 34 bytes, an f16 scale d then 32 int8 values; value k is d * q[k]. Blocks sit
// at any byte offset, so bytes are picked out of the words around them.
fn q8_byte(i: u32) -> u32 { return (wq[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu; }
fn q8_scale(block: u32) -> f32 {
  return unpack2x16float(q8_byte(block) | (q8_byte(block + 1u) << 8u)).x;
}
fn q8_value(block: u32, k: u32) -> i32 { return (i32(q8_byte(block + 2u + k)) << 24u) >> 24u; }
