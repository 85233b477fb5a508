/**
 * The router's type. In the workspace it comes from @boxes/api itself; in the built package (pnpm build) this
 * module's declaration is replaced by a standalone one generated from the same type (build/emit-router-type.ts),
 * so installing the SDK pulls no server package.
 */
export type { AppRouter } from '@boxes/api';
