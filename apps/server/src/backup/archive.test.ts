import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  BackupError,
  Digest,
  deriveKey,
  FORMAT,
  FORMAT_VERSION,
  type Manifest,
  type Member,
  newEncryption,
  openStream,
  readArchive,
  sealStream,
  writeArchive,
} from './archive';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxes-archive-test-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
let n = 0;
const tmp = (name: string) => path.join(dir, `${n++}-${name}`);

/** Writes `data` (sealed when key is given, in chunks of odd sizes) to a file; answers the member. */
async function member(name: string, data: Buffer, seal: { key: Buffer; id: string } | null): Promise<{ member: Member; file: string }> {
  const stored = seal ? `${name}.enc` : name;
  const file = tmp(stored);
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += 777) chunks.push(data.subarray(i, i + 777));
  const digest = new Digest();
  if (seal) await pipeline(Readable.from(chunks), sealStream(seal.key, seal.id, stored), digest, fs.createWriteStream(file));
  else await pipeline(Readable.from(chunks), digest, fs.createWriteStream(file));
  return { member: { name: stored, bytes: digest.bytes, sha256: digest.hex(), encrypted: !!seal }, file };
}

function manifestOf(id: string, members: Member[], encryption: Manifest['encryption']): Manifest {
  return {
    format: FORMAT,
    format_version: FORMAT_VERSION,
    backup_id: id,
    created_at: new Date().toISOString(),
    boxes_api_version: 'test',
    schema: { migrations: ['m1'], latest: 'm1' },
    database: { name: 'x', server_version: '15', pg_dump_version: 'pg_dump (PostgreSQL) 15.0', snapshot: 's', size_bytes: 1, grants: [] },
    instance: { base_domain: 'b', mail_host: 'm', site_url: 'http://s' },
    keys: { secret_key_source: 'file', secret_key_sha256: 'x', files: [] },
    encryption,
    members,
  };
}

/** Reads an archive back; answers each member's bytes (opened when sealed). */
async function readBack(file: string, key: Buffer | null): Promise<Record<string, Buffer>> {
  const out: Record<string, Buffer> = {};
  let id = '';
  await readArchive(
    file,
    (m) => {
      id = m.backup_id;
    },
    async (m, stream) => {
      const plain = m.encrypted ? stream.pipe(openStream(key!, id, m.name, m.bytes)) : stream;
      const chunks: Buffer[] = [];
      for await (const c of plain) chunks.push(c as Buffer);
      out[m.name] = Buffer.concat(chunks);
    },
  );
  return out;
}

async function archiveOf(seal: boolean) {
  const encryption = seal ? newEncryption() : null;
  const key = encryption ? await deriveKey('correct horse battery staple', encryption) : null;
  const id = `bak_${randomBytes(4).toString('hex')}`;
  const keys = Buffer.from(JSON.stringify({ secret_key: 'ab'.repeat(32) }));
  const dump = randomBytes(100_003);
  const a = await member('keys.json', keys, key ? { key, id } : null);
  const b = await member('database.dump', dump, key ? { key, id } : null);
  const file = tmp('backup.tar');
  await writeArchive(file, manifestOf(id, [a.member, b.member], encryption), { [a.member.name]: a.file, [b.member.name]: b.file });
  return { file, key, keys, dump, encryption, names: [a.member.name, b.member.name] };
}

/** How many of this process's file descriptors are open on `file` (Linux: /proc/self/fd). */
function openOn(file: string): number {
  let n = 0;
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`) === file) n++;
    } catch {
      /* closed while listed */
    }
  }
  return n;
}

describe('the backup archive', () => {
  it('is a tar that tar lists, mode 0600, the manifest first; its members read back as written', async () => {
    const x = await archiveOf(false);
    expect(fs.statSync(x.file).mode & 0o777).toBe(0o600);
    expect(execFileSync('tar', ['tf', x.file], { encoding: 'utf8' }).trim().split('\n')).toEqual(['manifest.json', 'keys.json', 'database.dump']);
    const got = await readBack(x.file, null);
    expect(got['keys.json']!.equals(x.keys)).toBe(true);
    expect(got['database.dump']!.equals(x.dump)).toBe(true);
  });

  it('sealed with a passphrase: nothing of the members is in the file, and they open with the key from the passphrase', async () => {
    const x = await archiveOf(true);
    expect(x.names).toEqual(['keys.json.enc', 'database.dump.enc']);
    const bytes = fs.readFileSync(x.file);
    expect(bytes.includes(Buffer.from('ab'.repeat(32)))).toBe(false);
    expect(bytes.includes(x.dump.subarray(5000, 5064))).toBe(false);
    const got = await readBack(x.file, await deriveKey('correct horse battery staple', x.encryption!));
    expect(got['keys.json.enc']!.equals(x.keys)).toBe(true);
    expect(got['database.dump.enc']!.equals(x.dump)).toBe(true);
  });

  it('a wrong passphrase does not open it', async () => {
    const x = await archiveOf(true);
    await expect(readBack(x.file, await deriveKey('wrong horse battery staple', x.encryption!))).rejects.toThrow(/does not open: a wrong passphrase/);
  });

  it('a changed byte in a member fails its checksum (clear) or its tag (sealed)', async () => {
    for (const seal of [false, true]) {
      const x = await archiveOf(seal);
      const bytes = fs.readFileSync(x.file);
      // A byte inside the last member's data (tar pads to 512 and ends with two zero blocks).
      const at = bytes.length - 1024 - 512 - 100;
      bytes[at] = bytes[at]! ^ 0xff;
      fs.writeFileSync(x.file, bytes);
      await expect(readBack(x.file, x.key)).rejects.toThrow(seal ? /does not open|damaged/ : /damaged: its SHA-256 is not the manifest's/);
    }
  });

  it('a sealed member moved into another archive does not open there (the backup id is authenticated)', async () => {
    const x = await archiveOf(true);
    const enc = x.encryption!;
    const other = `bak_other`;
    const a = await member('keys.json', Buffer.from('{}'), { key: x.key!, id: other });
    const b = await member('database.dump', Buffer.from('dump'), { key: x.key!, id: other });
    const file = tmp('swapped.tar');
    // The members of `other`, under a manifest that names another backup id.
    await writeArchive(file, manifestOf('bak_victim', [a.member, b.member], enc), { [a.member.name]: a.file, [b.member.name]: b.file });
    await expect(readBack(file, x.key)).rejects.toThrow(/does not open/);
  });

  it('a cut archive, or a file that is not one, is refused with a reason', async () => {
    const x = await archiveOf(false);
    const cut = tmp('cut.tar');
    fs.writeFileSync(cut, fs.readFileSync(x.file).subarray(0, 4096));
    await expect(readBack(cut, null)).rejects.toThrow();
    const notTar = tmp('not.tar');
    fs.writeFileSync(notTar, 'hello');
    await expect(readBack(notTar, null)).rejects.toThrow();
    const foreign = tmp('foreign.tar');
    execFileSync('tar', ['cf', foreign, '-C', dir, path.basename(cut)]);
    await expect(readBack(foreign, null)).rejects.toThrow(BackupError);
  });

  it.runIf(fs.existsSync('/proc/self/fd'))('a refused read lets go of the archive file, at the end of it or part way through', async () => {
    // At the end: the last member's checksum. Part way: the first sealed member does not open, the second is unread.
    const damaged = await archiveOf(false);
    const bytes = fs.readFileSync(damaged.file);
    const at = bytes.length - 1024 - 512 - 100;
    bytes[at] = bytes[at]! ^ 0xff;
    fs.writeFileSync(damaged.file, bytes);
    const sealed = await archiveOf(true);
    const cases: [string, Buffer | null, RegExp][] = [
      [damaged.file, null, /damaged/],
      [sealed.file, await deriveKey('wrong horse battery staple', sealed.encryption!), /does not open/],
    ];
    for (const [file, key, reason] of cases) {
      await expect(readBack(file, key)).rejects.toThrow(reason);
      // The file stream is destroyed, not left paused with its descriptor open; closing it takes a tick or two.
      await vi.waitFor(() => expect(openOn(file), `${file} is still open after the read was refused`).toBe(0), { timeout: 5000, interval: 10 });
    }
  });
});
