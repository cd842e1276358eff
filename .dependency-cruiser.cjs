// The layers of src/ (docs/internals.md, "Layers"): imports point down only, and nothing imports in
// a circle. `npm test` runs this (test/layers.test.ts), so a new upward import or cycle fails CI.
const ENTRY = '^src/(app|deps|wiring|shutdown)\\.ts$|^src/cli/';
const EDGES = '^src/(routes|tus|web|ingest)/';
const DOMAIN = '^src/(bundles|auth|abuse|billing|notify|sweeper)/';
const INFRA = '^src/(http|db|storage|state|mail|metrics|thumbs|zip)/';
const BASE = '^src/(config|errors|log|paths|plans)\\.ts$|^src/util/';
const CLIENT = '^src/client/';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No module may reach itself through its imports, type-only imports included.',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'infrastructure-imports-down',
      comment: 'The transport, SQL, storage, Redis state, mail, metrics, previews and zip know no handler, page, rule or wiring.',
      severity: 'error',
      from: { path: INFRA },
      to: { path: [ENTRY, EDGES, DOMAIN] },
    },
    {
      name: 'domain-imports-down',
      comment: 'Bundle, access, abuse, billing, notification and sweeping rules know no handler, page, CLI or wiring.',
      severity: 'error',
      from: { path: DOMAIN },
      to: { path: [ENTRY, EDGES] },
    },
    {
      name: 'edges-import-down',
      comment: 'Handlers and protocol adapters are given their dependencies (deps.ts, types only); they never import the entry points.',
      severity: 'error',
      from: { path: EDGES },
      to: { path: '^src/(app|wiring|shutdown)\\.ts$|^src/cli/' },
    },
    {
      name: 'edges-take-deps-as-types',
      comment: 'deps.ts describes the wiring; edges import it for its types only.',
      severity: 'error',
      from: { path: EDGES },
      to: { path: '^src/deps\\.ts$', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'base-imports-nothing-above',
      comment: 'Config, errors, logging, plans and utilities import only one another.',
      severity: 'error',
      from: { path: BASE },
      to: { path: '^src/', pathNot: BASE },
    },
    {
      name: 'client-stands-apart',
      comment: 'The command-line client talks to a server over HTTP: it imports only the base, and only the CLI imports it.',
      severity: 'error',
      from: { path: CLIENT },
      to: { path: '^src/', pathNot: [BASE, CLIENT] },
    },
    {
      name: 'only-the-cli-runs-the-client',
      comment: 'No part of the server imports the client.',
      severity: 'error',
      from: { path: '^src/', pathNot: [CLIENT, '^src/cli/main\\.ts$'] },
      to: { path: CLIENT },
    },
    {
      name: 'every-folder-has-a-layer',
      comment: 'A new folder or top-level file of src/ is placed in a layer here and in docs/internals.md.',
      severity: 'error',
      from: { path: '^src/', pathNot: [ENTRY, EDGES, DOMAIN, INFRA, BASE, CLIENT] },
      to: {},
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: 'node_modules' },
  },
};
