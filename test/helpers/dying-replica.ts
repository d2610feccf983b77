/**
 * A replica the tests kill mid-tick (SIGKILL): it claims DYING_JOB on DYING_TABLE for
 * DYING_OCCURRENCE, as holder `dying`, prints `ticking` once its tick runs, and never finishes it.
 */
import pg from 'pg'
import { withCronLease } from '../../src/index.ts'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 1 })
await withCronLease(
  pool,
  env('DYING_JOB'),
  Number(env('DYING_LEASE_MS')),
  () => {
    process.stdout.write('ticking\n')
    return new Promise(() => {})
  },
  { table: env('DYING_TABLE'), holder: 'dying', occurrence: env('DYING_OCCURRENCE') },
)
