// build-swap.mjs: a rebuild of apps/server/dist keeps the earlier builds' chunks, so a process started from the
// build before can still load the code it loads on demand; the files of builds older than KEEP_BUILDS go.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { carryEarlierBuilds, KEEP_BUILDS, swapInBuild } from '../build-swap.mjs';

let root = '';
let child: ChildProcess | null = null;
afterEach(() => {
  child?.kill();
  child = null;
  if (root) fs.rmSync(root, { recursive: true, force: true });
  root = '';
});

function writeBuild(dir: string, files: Record<string, string>): void {
  fs.mkdirSync(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
}

describe('swapping a new build into dist/', () => {
  it('a process running the build before still loads its chunks on demand after the swap', async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    // The first build: an entry that loads a chunk (which imports another) only when told to, as the apps load theirs.
    writeBuild(dist, {
      'main.mjs': `process.stdin.once('data', async () => {
  try { console.log((await import('./lazy-AAAAAAAA.mjs')).value); } catch (err) { console.log('failed: ' + err.code); }
  process.exit(0);
});
console.log('ready');\n`,
      'lazy-AAAAAAAA.mjs': "export { value } from './shared-BBBBBBBB.mjs';\n",
      'shared-BBBBBBBB.mjs': "export const value = 'loaded from the first build';\n",
      '.inputs': 'first\n',
    });
    const proc = spawn(process.execPath, [path.join(dist, 'main.mjs')], { stdio: ['pipe', 'pipe', 'inherit'] });
    child = proc;
    let out = '';
    proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    // 'close': its output read to the end, not only the process gone.
    const exited = new Promise<number | null>((resolve) => proc.on('close', resolve));
    for (let i = 0; i < 800 && !out.includes('ready'); i++) await new Promise((r) => setTimeout(r, 25));
    expect(out).toContain('ready');

    // The second build, from changed sources: its chunks have other names.
    const fresh = path.join(root, '.dist-2');
    writeBuild(fresh, { 'main.mjs': "console.log('second build');\n", 'lazy-CCCCCCCC.mjs': 'export const value = 2;\n', '.inputs': 'second\n' });
    swapInBuild(fresh, dist, 'test');

    proc.stdin!.write('go\n');
    expect(await exited).toBe(0);
    expect(out).toContain('loaded from the first build');
    expect(fs.readFileSync(path.join(dist, 'main.mjs'), 'utf8')).toBe("console.log('second build');\n");
    expect(fs.readFileSync(path.join(dist, '.inputs'), 'utf8')).toBe('second\n');
    expect(fs.readdirSync(dist).sort()).toEqual(['.inputs', '.kept', 'lazy-AAAAAAAA.mjs', 'lazy-CCCCCCCC.mjs', 'main.mjs', 'shared-BBBBBBBB.mjs']);
    expect(JSON.parse(fs.readFileSync(path.join(dist, '.kept'), 'utf8'))).toEqual({ build: 1, files: { 'lazy-AAAAAAAA.mjs': 0, 'shared-BBBBBBBB.mjs': 0 } });
    // Nothing of the swap is left beside dist/.
    expect(fs.readdirSync(root)).toEqual(['dist']);
  });

  it(`keeps the files of the last ${KEEP_BUILDS} builds before, then drops them; the new build's own files are its own`, () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    const builds = KEEP_BUILDS + 3;
    for (let n = 1; n <= builds; n++) {
      const fresh = path.join(root, `.dist-${n}`);
      // Every build has the entry and a chunk of unchanged content (the same name each time), and one of its own.
      writeBuild(fresh, { 'main.mjs': `// build ${n}\n`, 'same-SSSSSSSS.mjs': 'export const same = 1;\n', [`only-${n}.mjs`]: `export const n = ${n};\n` });
      swapInBuild(fresh, dist, n);
      const names = fs.readdirSync(dist).filter((f) => f.startsWith('only-'));
      const expected = Array.from({ length: n }, (_, i) => i + 1)
        .filter((k) => k >= n - KEEP_BUILDS)
        .map((k) => `only-${k}.mjs`);
      expect(names.sort()).toEqual(expected.sort());
      expect(fs.readFileSync(path.join(dist, 'main.mjs'), 'utf8')).toBe(`// build ${n}\n`);
      const kept = JSON.parse(fs.readFileSync(path.join(dist, '.kept'), 'utf8'));
      expect(kept.build).toBe(n);
      expect(Object.keys(kept.files)).not.toContain('same-SSSSSSSS.mjs');
      expect(Object.keys(kept.files)).not.toContain(`only-${n}.mjs`);
    }
  });

  it('carries nothing into a first build, and hard-links what it carries', () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    const first = path.join(root, '.dist-1');
    writeBuild(first, { 'main.mjs': '// 1\n', 'a-AAAAAAAA.mjs': '// a\n' });
    expect(carryEarlierBuilds(first, dist)).toEqual([]);
    fs.renameSync(first, dist);
    const second = path.join(root, '.dist-2');
    writeBuild(second, { 'main.mjs': '// 2\n' });
    expect(carryEarlierBuilds(second, dist)).toEqual(['a-AAAAAAAA.mjs']);
    expect(fs.statSync(path.join(second, 'a-AAAAAAAA.mjs')).ino).toBe(fs.statSync(path.join(dist, 'a-AAAAAAAA.mjs')).ino);
  });

  it('a rebuild of the same inputs keeps the build number, so it uses up none of the builds kept', () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    const build = (n: number, inputs: string, chunk: string) => {
      const fresh = path.join(root, `.dist-${n}`);
      writeBuild(fresh, { 'main.mjs': `// ${n}\n`, [chunk]: `// ${chunk}\n`, '.inputs': inputs });
      swapInBuild(fresh, dist, n);
      return JSON.parse(fs.readFileSync(path.join(dist, '.kept'), 'utf8')) as { build: number; files: Record<string, number> };
    };
    expect(build(1, 'a', 'c-A.mjs').build).toBe(1);
    expect(build(2, 'b', 'c-B.mjs')).toEqual({ build: 2, files: { 'c-A.mjs': 1 } });
    // Unchanged inputs, built again any number of times: still build 2, c-A.mjs still kept.
    for (let n = 3; n <= 3 + KEEP_BUILDS; n++) expect(build(n, 'b', 'c-B.mjs')).toEqual({ build: 2, files: { 'c-A.mjs': 1 } });
  });

  it('a directory left by a build that stopped half-way does not stop the next one', () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    writeBuild(dist, { 'main.mjs': '// old\n' });
    writeBuild(path.join(root, '.dist-old-7'), { 'main.mjs': '// left over\n' });
    const fresh = path.join(root, '.dist-7');
    writeBuild(fresh, { 'main.mjs': '// new\n' });
    swapInBuild(fresh, dist, 7);
    expect(fs.readFileSync(path.join(dist, 'main.mjs'), 'utf8')).toBe('// new\n');
    expect(fs.readdirSync(root)).toEqual(['dist']);
  });

  // A new build on another file system than dist/ cannot be renamed into place: the build before is put back.
  const shm = '/dev/shm';
  const otherDevice = fs.existsSync(shm) && fs.statSync(shm).dev !== fs.statSync(os.tmpdir()).dev;
  it.skipIf(!otherDevice)('a new build that cannot be put in place leaves the build before in place, and says why', () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-build-swap-'));
    const dist = path.join(root, 'dist');
    writeBuild(dist, { 'main.mjs': '// old\n', 'c-A.mjs': '// a\n' });
    const fresh = fs.mkdtempSync(path.join(shm, 'boxes-build-swap-'));
    try {
      writeBuild(fresh, { 'main.mjs': '// new\n' });
      expect(() => swapInBuild(fresh, dist, 8)).toThrow(/EXDEV/);
      expect(fs.readFileSync(path.join(dist, 'main.mjs'), 'utf8')).toBe('// old\n');
      expect(fs.readdirSync(root)).toEqual(['dist']);
    } finally {
      fs.rmSync(fresh, { recursive: true, force: true });
    }
  });
});
