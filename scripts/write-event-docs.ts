/** Writes docs/events.md from the event catalogue (packages/schemas/src/event-docs.ts). */
import fs from 'node:fs';
import path from 'node:path';
import { renderEventDocs } from '../packages/schemas/src/event-docs';

const file = path.resolve(import.meta.dirname, '../docs/events.md');
fs.writeFileSync(file, renderEventDocs());
console.log(`wrote ${path.relative(process.cwd(), file)}`);
