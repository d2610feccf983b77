import { defineConfig } from 'tsdown'

export default defineConfig([
  {
    entry: { index: 'src/index.ts' },
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
