/** Who really sent a message (SPF, DKIM, DMARC, ARC), spam scoring, extracted reply text, allow and block lists. */
export * from './authenticate';
export * from './spam';
export * from './lists';
export * from './inbound';
export * from './extract';
