import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { assertMajor, requestedMajor, startTestcontainers, testDatabaseUrl } from '../../dev/postgres.ts'

describe('the test database helper', () => {
  test('the server is the major version asked for, and a mismatch is an error', async () => {
    const url = await testDatabaseUrl()
    const major = requestedMajor() ?? 18
    await assertMajor(url, major)
    await assert.rejects(
      assertMajor(url, major === 14 ? 18 : 14),
      /asked for Postgres \d+, but the server .* is Postgres \d+/,
    )
  })

  test('PG_TEST_BACKEND=testcontainers without a Docker engine fails with a message that says what to do', async (t) => {
    let started: Awaited<ReturnType<typeof startTestcontainers>> | undefined
    try {
      started = await startTestcontainers(18)
    } catch (error) {
      assert.match(String((error as Error).message), /PG_TEST_BACKEND=testcontainers needs a reachable Docker engine/)
      assert.match(String((error as Error).message), /unset PG_TEST_BACKEND .* or set DATABASE_URL/)
      return
    }
    // A machine with Docker: the backend works, which is what the message would have promised.
    t.diagnostic('a Docker engine answered; testcontainers started Postgres 18')
    await assertMajor(started.url, 18)
    await started.stop()
  })
})
