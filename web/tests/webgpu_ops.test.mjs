// The op harness (tests/test_ops_reference.cpp, built for wasm as forge_web_op_tests) on the
// WebGPU backend under node, on Chromium's SwiftShader adapter through Dawn for Node: every
// forward op's cases against float64 and against the CPU, in windows too (the setting
// window_bytes). Training ops report a skip (the backend has none).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const program = join(root, 'build-wasm', 'forge_web_op_tests.js');
const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';

test('every forward op on WebGPU matches float64 and the CPU', () => {
  for (const [what, path] of [['the wasm op harness (bash scripts/build_wasm.sh)', program],
    ['Chromium\'s SwiftShader (scripts/setup.sh installs chromium)', icd],
    ['Dawn for Node (bash scripts/setup_web.sh)', join(root, 'web/node_modules/webgpu')]]) {
    assert.ok(existsSync(path), `missing ${what}: ${path}`);
  }
  const r = spawnSync(process.execPath, ['--no-experimental-fetch', join(root, 'web/run_wasm.mjs'),
    program, '--gtest_filter=AllOps/*webgpu*:BindingWindows/*webgpu*:AllDevices/*webgpu*'], {
    encoding: 'utf8', maxBuffer: 1 << 28, env: { ...process.env, VK_ICD_FILENAMES: icd }, timeout: 900e3,
  });
  const out = r.stdout + r.stderr;
  const failed = out.split('\n').filter((l) => l.startsWith('[  FAILED  ]'));
  assert.equal(r.status, 0, `exit ${r.status} ${r.signal ?? ''}\n${failed.slice(0, 20).join('\n')}\n${out.slice(-3000)}`);
  // The cases really ran on the GPU backend: the forward ops' (~400 reference cases, as many
  // parity runs against the CPU, and the windowed runs), not skips.
  const ran = (re) => out.split('\n').filter((l) => l.startsWith('[       OK ]') && re.test(l)).length;
  for (const op of ['add', 'gelu', 'matmul', 'softmax', 'argmax_rows', 'layernorm', 'embedding',
    'split_heads', 'merge_heads', 'attention', 'attention_at']) {
    assert.ok(ran(new RegExp(`OpReference\\.MatchesFloat64/webgpu_0_${op}_`)) > 0, `no ${op} case ran`);
  }
  assert.ok(ran(/OpReference\.MatchesFloat64\/webgpu/) >= 350, `only ${ran(/OpReference\.MatchesFloat64\/webgpu/)} reference cases ran`);
  assert.ok(ran(/OpParity\.MatchesCpu\/webgpu/) >= 350, `only ${ran(/OpParity\.MatchesCpu\/webgpu/)} parity cases ran`);
  assert.ok(ran(/BindingWindows\/OpWindows\.MatchFloat64\/webgpu/) >= 50);
  // Q8_0 weights expanded in the shader: the weight-dtype cases of matmul and embedding.
  assert.ok(ran(/webgpu_0_(matmul|embedding)_.*q8_0/) > 0, 'no q8_0 case ran');
});

test('the products of a GPU adapter\'s decode kernels (K split in a workgroup), forced on SwiftShader', () => {
  const r = spawnSync(process.execPath, ['--no-experimental-fetch', join(root, 'web/run_wasm.mjs'),
    program, '--gtest_filter=AllOps/*webgpu_0_*matmul*'], {
    encoding: 'utf8', maxBuffer: 1 << 28, timeout: 900e3,
    env: { ...process.env, VK_ICD_FILENAMES: icd, FORGE_WEBGPU_DECODE: 'split' },
  });
  const out = r.stdout + r.stderr;
  const failed = out.split('\n').filter((l) => l.startsWith('[  FAILED  ]'));
  assert.equal(r.status, 0, `exit ${r.status}\n${failed.slice(0, 20).join('\n')}\n${out.slice(-3000)}`);
  const ok = out.split('\n').filter((l) => l.startsWith('[       OK ]')).length;
  assert.ok(ok >= 150, `only ${ok} matmul cases ran`);
});
