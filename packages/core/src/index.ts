/** Domain logic of Boxes, one folder per domain. No HTTP, tRPC or SMTP here. */
export * from './shared/errors';
export * from './shared/ids';
export * from './shared/crypto';
export * from './shared/context';
export * from './events/chain';
export * from './events/append';
export * from './events/read';
export * from './keys/keys';
export * from './boxes/boxes';
export * from './accounts/signup';
export * from './accounts/account';
export * from './domains/names';
export * from './domains/records';
