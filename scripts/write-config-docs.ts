/** Writes docs/operator/configuration.md from the settings schema (packages/config/src/docs.ts). */
import fs from 'node:fs';
import path from 'node:path';
import { renderConfigDocs } from '../packages/config/src/docs';

const file = path.resolve(import.meta.dirname, '../docs/operator/configuration.md');
fs.mkdirSync(path.dirname(file), { recursive: true });
fs.writeFileSync(file, renderConfigDocs());
console.log(`wrote ${path.relative(process.cwd(), file)}`);
