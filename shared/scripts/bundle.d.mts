// Types of bundle.mjs for the TypeScript that imports it (tests/src/vm/hookos.ts); esbuild checks the options.
export declare const ESM_NODE_BUNDLE: Readonly<{
  bundle: true;
  platform: "node";
  format: "esm";
  target: string;
  banner: { js: string };
  legalComments: "none";
  logLevel: "warning";
}>;
export declare const PARTS: Readonly<Record<string, { entry: string; out: string; natives: string[] }>>;
export declare function bundlePart(build: (options: object) => Promise<unknown>, part: string, outfile?: string): Promise<string>;
