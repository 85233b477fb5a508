/**
 * Writes a standalone declaration of the router's type for the built SDK. The router's own type (typeof
 * appRouter in @boxes/api) refers to the server's context (the database client, queues, ...); an agent's
 * project has none of that. This reads the router with the TypeScript compiler API and prints, for every
 * procedure, its kind and its input and output types as plain structural types (objects, unions, literals,
 * arrays, Date), then rebuilds a router type from them with @trpc/server's public types. The printed types are
 * what the SDK's callers see in the workspace too, so a wrong field fails to compile the same way.
 */
import fs from 'node:fs';
import path from 'node:path';
import ts from 'ts5';

const here = path.dirname(new URL(import.meta.url).pathname);
const sdk = path.resolve(here, '..');

export function emitRouterType(outFile: string): void {
  const probe = path.join(sdk, 'build', '.probe.ts');
  fs.writeFileSync(probe, "import type { AppRouter } from '@boxes/api';\nexport type Probe = AppRouter;\n");
  try {
    const program = ts.createProgram([probe], {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      target: ts.ScriptTarget.ES2022,
      types: ['node'],
      baseUrl: sdk,
    });
    const checker = program.getTypeChecker();
    const sf = program.getSourceFile(probe)!;
    const alias = sf.statements.find(ts.isTypeAliasDeclaration)!;
    const router = checker.getTypeAtLocation(alias);
    const prop = (t: ts.Type, name: string): ts.Type => {
      const s = t.getProperty(name);
      if (!s) throw new Error(`no property ${name} on ${checker.typeToString(t)}`);
      return checker.getTypeOfSymbol(s);
    };

    const print = (t: ts.Type, depth = 0): string => {
      if (depth > 40) throw new Error(`type too deep: ${checker.typeToString(t)}`);
      const f = t.flags;
      if (f & ts.TypeFlags.Any) return 'any';
      if (f & ts.TypeFlags.Unknown) return 'unknown';
      if (f & ts.TypeFlags.Never) return 'never';
      if (f & ts.TypeFlags.Void) return 'void';
      if (f & ts.TypeFlags.Undefined) return 'undefined';
      if (f & ts.TypeFlags.Null) return 'null';
      if (f & ts.TypeFlags.String) return 'string';
      if (f & ts.TypeFlags.Number) return 'number';
      if (f & ts.TypeFlags.BigInt) return 'bigint';
      if (f & ts.TypeFlags.Boolean) return 'boolean';
      if (f & ts.TypeFlags.BooleanLiteral) return checker.typeToString(t);
      if (t.isStringLiteral()) return JSON.stringify(t.value);
      if (t.isNumberLiteral()) return String(t.value);
      if (t.isUnion()) {
        const parts = t.types.map((x) => print(x, depth + 1));
        // true | false reads better as boolean.
        const withBool = parts.includes('true') && parts.includes('false') ? [...parts.filter((p) => p !== 'true' && p !== 'false'), 'boolean'] : parts;
        return [...new Set(withBool)].map((p) => (p.includes('=>') ? `(${p})` : p)).join(' | ');
      }
      if (t.isIntersection()) return t.types.map((x) => `(${print(x, depth + 1)})`).join(' & ');
      if (f & ts.TypeFlags.Object) {
        const name = t.getSymbol()?.getName();
        if (name === 'Date') return 'Date';
        if (checker.isTupleType(t))
          return `[${checker
            .getTypeArguments(t as ts.TypeReference)
            .map((x) => print(x, depth + 1))
            .join(', ')}]`;
        if (checker.isArrayType(t)) {
          const [el] = checker.getTypeArguments(t as ts.TypeReference);
          return `Array<${print(el!, depth + 1)}>`;
        }
        const members: string[] = [];
        for (const info of checker.getIndexInfosOfType(t)) {
          members.push(`[key: ${print(info.keyType, depth + 1)}]: ${print(info.type, depth + 1)};`);
        }
        for (const p of checker.getPropertiesOfType(t)) {
          const optional = (p.flags & ts.SymbolFlags.Optional) !== 0;
          let pt = checker.getTypeOfSymbol(p);
          if (optional && pt.isUnion()) {
            const rest = pt.types.filter((x) => !(x.flags & ts.TypeFlags.Undefined));
            if (rest.length === 1) pt = rest[0]!;
          }
          const key = /^[A-Za-z_$][\w$]*$/.test(p.getName()) ? p.getName() : JSON.stringify(p.getName());
          members.push(`${key}${optional ? '?' : ''}: ${print(pt, depth + 1)};`);
        }
        return `{ ${members.join(' ')} }`;
      }
      throw new Error(`cannot print ${checker.typeToString(t)}`);
    };

    const walk = (record: ts.Type, indent: string): string => {
      const lines: string[] = [];
      for (const s of checker.getPropertiesOfType(record)) {
        const t = checker.getTypeOfSymbol(s);
        const def = t.getProperty('_def');
        if (def) {
          const d = checker.getTypeOfSymbol(def);
          const kind = checker.typeToString(prop(d, 'type'));
          const types = prop(d, '$types');
          lines.push(`${indent}${s.getName()}: { kind: ${kind}; input: ${print(prop(types, 'input'))}; output: ${print(prop(types, 'output'))} };`);
        } else {
          lines.push(`${indent}${s.getName()}: {\n${walk(t, `${indent}  `)}\n${indent}};`);
        }
      }
      return lines.join('\n');
    };

    const def = prop(router, '_def');
    const record = prop(def, 'record');
    const errorShape = prop(prop(prop(def, '_config'), '$types'), 'errorShape');
    const out = `// Generated by packages/sdk/build/emit-router-type.ts from the router's type: every procedure's kind, input and
// output. Do not edit; pnpm --filter @boxes/sdk build writes it again.
import type { TRPCBuiltRouter, TRPCMutationProcedure, TRPCQueryProcedure } from '@trpc/server';

/** Every procedure of the Boxes API: its kind (query or mutation), input and output. */
export interface BoxesApi {
${walk(record, '  ')}
}

type Procedures<T> = {
  [K in keyof T]: T[K] extends { kind: 'query'; input: infer I; output: infer O }
    ? TRPCQueryProcedure<{ input: I; output: O; meta: object }>
    : T[K] extends { kind: 'mutation'; input: infer I; output: infer O }
      ? TRPCMutationProcedure<{ input: I; output: O; meta: object }>
      : Procedures<T[K]>;
};

/** The error shape every procedure answers with (data.boxes carries code, status, request_id and details). */
export type BoxesErrorShape = ${print(errorShape)};

export type AppRouter = TRPCBuiltRouter<{ ctx: object; meta: object; errorShape: BoxesErrorShape; transformer: false }, Procedures<BoxesApi>>;
`;
    fs.mkdirSync(path.dirname(outFile), { recursive: true });
    fs.writeFileSync(outFile, out);
  } finally {
    fs.rmSync(probe, { force: true });
  }
}
