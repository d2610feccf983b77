import { defineConfig } from 'tsdown'

export default defineConfig([
  {
    // The NestJS subpath is an entry of its own: nothing of the core imports it, so loading
    // 'pg-cron-lease' loads no NestJS package. NestJS packages are peers, so they stay external.
    // The OpenTelemetry subpath too (its @opentelemetry/api is an optional peer). The dashboard is one too; its page script and style sheet stay plain files, copied beside the
    // bundles (dist/assets/) and read at run time, so one copy serves ESM, CJS and the bin.
    entry: {
      index: 'src/index.ts',
      nestjs: 'src/nestjs/index.ts',
      dashboard: 'src/dashboard/index.ts',
      otel: 'src/otel/index.ts',
    },
    format: ['esm', 'cjs'],
    dts: true,
    platform: 'node',
    target: 'node20',
    clean: true,
    // import.meta.url in the CJS build, where the dashboard finds its assets.
    shims: true,
    copy: [{ from: 'src/dashboard/assets' }],
  },
  {
    // The pg-cron-lease bin: ESM only (it uses top-level await) and no types. tsdown cleans dist/
    // once, before both builds, for the entry above.
    entry: { cli: 'src/cli.ts' },
    format: ['esm'],
    dts: false,
    platform: 'node',
    target: 'node20',
    clean: false,
    // The dashboard command serves these beside the bin, in a build of the bin alone too (the CLI tests).
    copy: [{ from: 'src/dashboard/assets' }],
  },
])
