/**
 * The WASM schema engine introspects catalogs whose columns use Postgres system types (name, "char", reg*)
 * that @prisma/adapter-pg 6 cannot decode (prisma/orm#27403). For this authoring tool only, a pg Client
 * subclass reports those columns as text; pg already hands their values over as strings.
 *
 * Text is not enough for "char": the engine reads pg_constraint.contype (CHECK and EXCLUDE constraints) as a
 * single character and aborts the whole process ("RuntimeError: unreachable") when it gets a string instead.
 * The client notes which columns of a result were "char", and `withCharacterColumns` makes the adapter report
 * those as Prisma's Character column type.
 */
import { ColumnTypeEnum, type SqlDriverAdapter, type SqlQueryable, type SqlResultSet } from '@prisma/driver-adapter-utils';
import pg from 'pg';

const TEXT = 25;
const TEXT_ARRAY = 1009;
const CHAR = 18;
const SYSTEM_TYPES = new Set([CHAR, 19, 24, 28, 194, 2202, 2203, 2204, 2205, 2206, 3734, 3769, 4089, 4096]);
const SYSTEM_ARRAYS = new Set([1002, 1003, 1008, 1011, 2207, 2208, 2209, 2210, 2211]);

type Result = { fields?: { dataTypeID: number }[]; rows?: unknown[] } | undefined;

/** The "char" columns of a result, by its rows array (the adapter passes that array on as it is). */
const charColumns = new WeakMap<object, number[]>();

function relabel<T extends Result>(res: T): T {
  const chars: number[] = [];
  for (const [i, f] of (res?.fields ?? []).entries()) {
    if (f.dataTypeID === CHAR) chars.push(i);
    if (SYSTEM_TYPES.has(f.dataTypeID)) f.dataTypeID = TEXT;
    else if (SYSTEM_ARRAYS.has(f.dataTypeID)) f.dataTypeID = TEXT_ARRAY;
  }
  if (chars.length && res?.rows) charColumns.set(res.rows, chars);
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

function reportCharacters(res: SqlResultSet): SqlResultSet {
  for (const i of charColumns.get(res.rows) ?? []) res.columnTypes[i] = ColumnTypeEnum.Character;
  return res;
}

function patchQueryRaw<T extends SqlQueryable>(queryable: T): T {
  const queryRaw = queryable.queryRaw.bind(queryable);
  queryable.queryRaw = async (query) => reportCharacters(await queryRaw(query));
  return queryable;
}

/** Makes an adapter over RelabelingClients, and the transactions it starts, report "char" columns as Character. */
export function withCharacterColumns<T extends SqlDriverAdapter>(adapter: T): T {
  const startTransaction = adapter.startTransaction.bind(adapter);
  adapter.startTransaction = async (isolationLevel) => patchQueryRaw(await startTransaction(isolationLevel));
  return patchQueryRaw(adapter);
}
