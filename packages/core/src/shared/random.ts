/** Random bytes from the CSPRNG, read ahead in blocks. */
import { randomFillSync } from 'node:crypto';

/**
 * Reads of `size` random bytes served from a block of `count` reads: one call into native code per block instead
 * of one per read (each call cost about as much as what ids and seals do with the bytes). Each byte is handed out
 * once, in order. take() answers where the read's bytes start in `bytes`; they stay there only until the next
 * take() that refills the block, so a caller copies or uses them at once.
 */
export function randomBlocks(size: number, count: number): { bytes: Buffer; take(): number } {
  const bytes = Buffer.alloc(size * count);
  let offset = bytes.length;
  return {
    bytes,
    take() {
      if (offset === bytes.length) {
        randomFillSync(bytes);
        offset = 0;
      }
      const at = offset;
      offset += size;
      return at;
    },
  };
}
