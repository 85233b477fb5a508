/**
 * Zod schemas shared by the API, the SDK and MCP. Every public field carries .meta({ description, example }):
 * that text is the API reference. No server dependencies here.
 */
export * from './common';
export * from './statuses';
export * from './strings';
export * from './signup';
export * from './account';
export * from './keys';
export * from './boxes';
export * from './events';
export * from './event-upcast';
export * from './messages';
export * from './webhooks';
export * from './surfaces';
export * from './credit';
export * from './domains';
export * from './dns';
export * from './audit';
export * from './bulk';
export * from './app-passwords';
export * from './threads';
export * from './sending-ips';
export * from './forwards';
export * from './trust';
export * from './drafts';
export * from './guard';
export * from './reviews';
