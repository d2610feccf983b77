import { defineConfig } from 'tsdown'

export default defineConfig([
  {
    // The NestJS subpath is an entry of its own: nothing of the core imports it, so loading
    // 'pg-cron-lease' loads no NestJS package. NestJS packages are peers, so they stay external.
    entry: { index: 'src/index.ts', nestjs: 'src/nestjs/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
    platform: 'node',
    target: 'node20',
    clean: true,
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
  },
])
