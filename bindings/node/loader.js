'use strict';
// The native addon's loader: the prebuilt `terminus-kernel.PLATFORM.node` of this platform (a
// glibc or musl Linux, macOS, Windows), or an error naming what it looked for.

const { existsSync, readFileSync } = require('node:fs');
const { join } = require('node:path');

function isMusl() {
  if (process.platform !== 'linux') return false;
  try {
    const report = process.report && process.report.getReport();
    if (report && report.header) return !report.header.glibcVersionRuntime;
  } catch {
    // Fall back to the loader's name.
  }
  try {
    return readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
  } catch {
    return false;
  }
}

function loadNative() {
  const { platform, arch } = process;
  const abis = platform === 'linux' ? (isMusl() ? ['musl'] : ['gnu']) : platform === 'win32' ? ['msvc'] : [''];
  const tried = [];
  for (const abi of abis) {
    const file = join(__dirname, `terminus-kernel.${platform}-${arch}${abi ? `-${abi}` : ''}.node`);
    tried.push(file);
    if (existsSync(file)) return require(file);
  }
  const universal = join(__dirname, `terminus-kernel.${platform}-universal.node`);
  tried.push(universal);
  if (existsSync(universal)) return require(universal);
  throw new Error(
    `terminus-kernel: no native addon for ${platform}-${arch}; build it with \`npm ci && npm run build\` ` +
      `in the package's folder (looked for ${tried.join(', ')})`,
  );
}

const native = loadNative();

module.exports = { native };
