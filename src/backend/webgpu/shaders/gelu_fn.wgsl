// GPT-2's tanh GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh through
// exp(-2|u|), which cannot overflow (WGSL's tanh may, for large |u|, on some drivers).
fn gelu(v: f32) -> f32 {
  let u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
  let e = exp(-2.0 * abs(u));
  return 0.5 * v * (1.0 + sign(u) * (1.0 - e) / (1.0 + e));
}
