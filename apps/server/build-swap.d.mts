/** Types of build-swap.mjs (plain JavaScript: build.mjs runs it with node alone). */
export const KEEP_BUILDS: number;
export function carryEarlierBuilds(fresh: string, dist: string, keep?: number): string[];
export function swapInBuild(fresh: string, dist: string, tag?: string | number): void;
