/**
 * `pg` 8.20, the last release without `client.getTransactionStatus()`, installed beside the current
 * one as the devDependency `pg-8-20`; typed as the current `pg`, whose API it shares but for that.
 */
import { createRequire } from 'node:module'
import type pg from 'pg'

export const pg820 = createRequire(import.meta.url)('pg-8-20') as typeof pg
