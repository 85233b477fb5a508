/**
 * The WASM schema engine introspects catalogs whose columns use Postgres system types (name, "char", reg*)
 * that @prisma/adapter-pg 6 cannot decode (prisma/orm#27403). For this authoring tool only, a pg Client
 * subclass reports those columns as text; pg already hands their values over as strings.
 */
import pg from 'pg';

const TEXT = 25;
const TEXT_ARRAY = 1009;
const SYSTEM_TYPES = new Set([18, 19, 24, 28, 194, 2202, 2203, 2204, 2205, 2206, 3734, 3769, 4089, 4096]);
const SYSTEM_ARRAYS = new Set([1002, 1003, 1008, 1011, 2207, 2208, 2209, 2210, 2211]);

type Result = { fields?: { dataTypeID: number }[] } | undefined;

function relabel<T extends Result>(res: T): T {
  for (const f of res?.fields ?? []) {
    if (SYSTEM_TYPES.has(f.dataTypeID)) f.dataTypeID = TEXT;
    else if (SYSTEM_ARRAYS.has(f.dataTypeID)) f.dataTypeID = TEXT_ARRAY;
  }
  return res;
}

export class RelabelingClient extends pg.Client {
  override query(...args: unknown[]): never {
    // pg-pool calls query with a callback; the adapter's transactions call it for a promise.
    const last = args.length - 1;
    const cb = args[last];
    if (typeof cb === 'function') {
      args[last] = (err: unknown, res: Result) => (cb as (e: unknown, r: Result) => void)(err, relabel(res));
    }
    const out = (super.query as (...a: unknown[]) => unknown).apply(this, args);
    if (out && typeof (out as Promise<unknown>).then === 'function') return (out as Promise<Result>).then(relabel) as never;
    return out as never;
  }
}
