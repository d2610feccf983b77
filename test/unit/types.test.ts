/**
 * Type tests: `npm run typecheck` compiles this file, and each `@ts-expect-error` fails the build
 * if the public types ever stop rejecting what they must reject. The runtime part checks the
 * values the types describe.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type pg from 'pg'
import {
  type KeepAlive,
  LEASE,
  type LeaseContext,
  type LeaseOptions,
  type LeaseOutcome,
  type Queryable,
  withCronLease,
} from '../../src/index.ts'
import { standIn } from '../helpers/stand-in.ts'

// What a Queryable accepts: pg's Pool, Client and PoolClient, and any query(text, params) that
// resolves to rows and/or rowCount.
export const fromPool = (pool: pg.Pool): Queryable => pool
export const fromClient = (client: pg.Client): Queryable => client
export const fromPoolClient = (client: pg.PoolClient): Queryable => client
export const rowsOnly: Queryable = { query: async () => ({ rows: [] }) }
export const rowCountOnly: Queryable = { query: async () => ({ rowCount: 0 }) }
export const syncResult: Queryable = { query: () => ({ rowCount: 1, rows: [{}] }) }

// What it rejects.
// @ts-expect-error: no query function
export const noQuery: Queryable = {}
// @ts-expect-error: query must resolve to a result object
export const resolvesNumber: Queryable = { query: async () => 5 }

// @ts-expect-error: an unknown option is a compile error as well as a runtime TypeError
export const typo: LeaseOptions = { tabel: 'x' }
// @ts-expect-error: keepAlive needs both durations
export const halfKeepAlive: KeepAlive = { beatMs: 100 }

export async function outcomes(db: Queryable) {
  const outcome: LeaseOutcome<number> = await withCronLease(db, 'j', LEASE.HOURLY, () => 1)
  // The union narrows: a run has its result, a skip has null.
  if (outcome.ran) {
    const n: number = outcome.result
    return n
  }
  const nothing: null = outcome.result
  // The documented loose shape still fits.
  const loose: { ran: boolean; result: number | null } = outcome
  return [nothing, loose]
}

export async function contextShape(ctx: LeaseContext) {
  const renewed: boolean = await ctx.renew()
  const token: string | null = ctx.claimToken
  const signal: AbortSignal = ctx.signal
  // @ts-expect-error: the context is read-only
  ctx.leaseMs = 5
  return [renewed, token, signal]
}

test('a tick returning nothing resolves ran with an undefined result', async () => {
  assert.deepEqual(await withCronLease(standIn(), 'j', 1000, () => {}), { ran: true, result: undefined })
})
