/**
 * Preloaded into every test file's process by scripts/test.ts when it runs files side by side:
 * points DATABASE_URL at a server no other test file is using. Each file needs a cluster of its
 * own, because the tests of "a loser writes nothing" read transaction IDs and WAL, which belong
 * to the whole cluster. A server is held by a lock file naming the process; the lock of a process
 * that died without removing it is taken over.
 */
import { openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

const servers: string[] = JSON.parse(process.env.PGCL_TEST_SERVERS ?? '[]')
const locks = process.env.PGCL_TEST_LOCKS

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

function take(lock: string): boolean {
  try {
    const fd = openSync(lock, 'wx')
    writeSync(fd, String(process.pid))
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  }
  // A lock being written reads empty for an instant; only a named, dead holder is stale. Another
  // process may remove the lock meanwhile: then the next round takes it.
  try {
    const holder = Number(readFileSync(lock, 'utf8'))
    if (holder > 0 && !alive(holder)) unlinkSync(lock)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  return false
}

// Processes a test starts (replicas) inherit the server their file holds.
if (servers.length > 0 && locks !== undefined && process.env.PGCL_TEST_SERVER_HELD === undefined) {
  const deadline = Date.now() + 60_000
  let held: string | undefined
  while (held === undefined) {
    held = servers.find((_, i) => take(path.join(locks, `server-${i}.lock`)))
    if (held !== undefined) break
    if (Date.now() > deadline) throw new Error(`no test server came free in 60 s (locks in ${locks})`)
    await sleep(20)
  }
  const lock = path.join(locks, `server-${servers.indexOf(held)}.lock`)
  process.env.DATABASE_URL = held
  process.env.PGCL_TEST_SERVER_HELD = '1'
  process.on('exit', () => unlinkSync(lock))
}
