#!/usr/bin/env bash
# Installs the npm packages of forge's browser tests (pinned in web/package.json and
# package-lock.json) into web/node_modules: npm webgpu (Dawn for Node), which runs the WGSL
# kernels under node on the Vulkan driver VK_ICD_FILENAMES names (in CI: Chromium's
# SwiftShader), and playwright-core. Idempotent (scripts/setup_npm.sh).
exec bash "$(dirname "${BASH_SOURCE[0]}")/setup_npm.sh" web
