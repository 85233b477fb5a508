/**
 * The error codes each procedure declares (meta.errors) are the ones its work can throw: the calls from its
 * resolver are followed through packages/api and packages/core (functions, arrow functions and methods reached
 * by name, callbacks included), and every `new AppError('<code>', ...)` met on the way counts. A procedure
 * that can throw a code it does not declare fails here, and so does one that declares a code it cannot throw,
 * so the OpenAPI error responses generated from the declarations follow the code. Calls through an interface
 * (Registrar, PaymentProvider) are not followed: their implementations throw no AppError.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import type * as TS from '../../sdk/node_modules/ts5';
import { appRouter } from './router';
import { impliedErrorCodes } from './error-contract';
import type { BoxesMeta, Meta } from './trpc';

// TypeScript 7 (the native compiler the project builds with) has no stable compiler API; the SDK package
// installs TypeScript 5 to check its published types, and its API reads the same sources.
const ts = createRequire(import.meta.url)('../../sdk/node_modules/ts5') as typeof TS;
const PACKAGES = path.resolve(fileURLToPath(new URL('../..', import.meta.url)));

function functionOf(decl: TS.Declaration): TS.Node | null {
  if (ts.isFunctionDeclaration(decl) || ts.isMethodDeclaration(decl) || ts.isArrowFunction(decl) || ts.isFunctionExpression(decl) || ts.isGetAccessor(decl))
    return decl;
  if (
    (ts.isVariableDeclaration(decl) || ts.isPropertyAssignment(decl)) &&
    decl.initializer &&
    (ts.isArrowFunction(decl.initializer) || ts.isFunctionExpression(decl.initializer))
  )
    return decl.initializer;
  if (ts.isClassDeclaration(decl)) return decl;
  return null;
}

/** The AppError codes constructed anywhere reachable from a resolver. */
function reachableCodes(checker: TS.TypeChecker, resolver: TS.Node): Set<string> {
  const seen = new Set<TS.Node>();
  const codes = new Set<string>();
  const queue: TS.Node[] = [resolver];
  const ours = (sf: TS.SourceFile) => sf.fileName.startsWith(`${PACKAGES}/`) && !sf.fileName.includes('/node_modules/') && !sf.fileName.endsWith('.test.ts');
  while (queue.length) {
    const node = queue.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    const visit = (n: TS.Node): void => {
      if (ts.isNewExpression(n) && n.expression.getText() === 'AppError' && n.arguments?.[0]) {
        // Literal codes, also inside a conditional (cond ? 'a' : 'b').
        const collect = (a: TS.Node): void => {
          if (ts.isStringLiteral(a)) codes.add(a.text);
          a.forEachChild(collect);
        };
        collect(n.arguments[0]);
      }
      if (ts.isIdentifier(n)) {
        let symbol = checker.getSymbolAtLocation(n);
        if (symbol && symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
        for (const decl of symbol?.declarations ?? []) {
          if (!ours(decl.getSourceFile())) continue;
          const fn = functionOf(decl);
          if (fn && !seen.has(fn)) queue.push(fn);
        }
      }
      n.forEachChild(visit);
    };
    node.forEachChild(visit);
  }
  return codes;
}

/**
 * The .query(resolver) or .mutation(resolver) call that makes a procedure: the expression itself, or inside the
 * local function that builds it (dns.ts's change('create', ...)).
 */
function resolverCall(checker: TS.TypeChecker, expr: TS.Expression): TS.CallExpression | null {
  const find = (n: TS.Node): TS.CallExpression | null => {
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression) && ['query', 'mutation'].includes(n.expression.name.text)) return n;
    return n.forEachChild(find) ?? null;
  };
  const direct = find(expr);
  if (direct) return direct;
  if (ts.isCallExpression(expr) && ts.isIdentifier(expr.expression)) {
    const decl = checker.getSymbolAtLocation(expr.expression)?.declarations?.[0];
    const fn = decl && functionOf(decl);
    if (fn) return find(fn);
  }
  return null;
}

interface Found {
  codes: Set<string>;
  keyed: boolean;
}

/** routerVariable.procedure -> what its resolver can throw, and whether it is a keyed procedure. */
function analyse(): Map<string, Found> {
  const config = ts.getParsedCommandLineOfConfigFile(
    path.join(PACKAGES, 'api/tsconfig.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  if (!config) throw new Error('packages/api/tsconfig.json cannot be read');
  const program = ts.createProgram({ rootNames: config.fileNames, options: { ...config.options, noEmit: true } });
  const checker = program.getTypeChecker();
  const found = new Map<string, Found>();
  for (const sf of program.getSourceFiles()) {
    if (!sf.fileName.startsWith(path.join(PACKAGES, 'api/src/routers/'))) continue;
    sf.forEachChild(function visit(n): void {
      // export const xRouter = router({ name: keyProcedure.meta(...).input(...).mutation(resolver), ... })
      if (
        ts.isVariableDeclaration(n) &&
        ts.isIdentifier(n.name) &&
        n.initializer &&
        ts.isCallExpression(n.initializer) &&
        n.initializer.expression.getText() === 'router'
      ) {
        const routerName = n.name.text;
        const object = n.initializer.arguments[0];
        if (!object || !ts.isObjectLiteralExpression(object)) return;
        for (const prop of object.properties) {
          if (!ts.isPropertyAssignment(prop)) continue;
          const call = resolverCall(checker, prop.initializer);
          const name = `${routerName}.${prop.name.getText()}`;
          if (!call?.arguments[0]) throw new Error(`${name}: no .query() or .mutation() found`);
          let root: TS.Expression = call;
          while (ts.isCallExpression(root) || ts.isPropertyAccessExpression(root)) root = root.expression;
          found.set(name, { codes: reachableCodes(checker, call.arguments[0]), keyed: root.getText() === 'keyProcedure' });
        }
        return;
      }
      n.forEachChild(visit);
    });
  }
  return found;
}

/** router.ts's key for each router variable (messages: messagesRouter). */
function routerKeys(): Map<string, string> {
  const source = ts.sys.readFile(path.join(PACKAGES, 'api/src/router.ts')) ?? '';
  return new Map([...source.matchAll(/^\s+(\w+): (\w+Router),$/gm)].map((m) => [m[2]!, m[1]!]));
}

it('every procedure declares exactly the error codes its work can throw', () => {
  const found = analyse();
  const keys = routerKeys();
  const procedures = (appRouter as unknown as { _def: { procedures: Record<string, { _def: { meta?: Meta } }> } })._def.procedures;
  const problems: string[] = [];
  let checked = 0;
  for (const [name, { codes, keyed }] of found) {
    const [routerName, procName] = name.split('.') as [string, string];
    const key = `${keys.get(routerName)}.${procName}`;
    const meta = procedures[key]?._def.meta as (BoxesMeta & Meta) | undefined;
    if (!procedures[key]) {
      problems.push(`${name}: not found in the router as ${key}`);
      continue;
    }
    checked++;
    const implied = new Set<string>(
      impliedErrorCodes({ method: meta?.openapi?.method ?? 'POST', keyed, scope: Boolean(meta?.scope), accountWide: Boolean(meta?.accountWide) }),
    );
    const expected = [...codes].filter((c) => !implied.has(c)).sort();
    const declared = [...(meta?.errors ?? [])].sort();
    if (JSON.stringify(expected) !== JSON.stringify(declared)) {
      problems.push(
        `${key}: declares [${declared.join(', ')}], can throw [${expected.join(', ')}]: set meta.errors to ${JSON.stringify(expected).replaceAll('"', "'")}`,
      );
    }
  }
  expect(checked).toBe(Object.keys(procedures).length);
  expect(problems).toEqual([]);
}, 120_000);
