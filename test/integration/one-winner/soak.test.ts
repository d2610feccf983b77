import { describe, test } from 'node:test'
import { testDatabaseUrl } from '../../../dev/postgres.ts'
import { assertCleanSoak } from '../../../dev/soak/assert.ts'
import { runSoak } from '../../../dev/soak/run.ts'

describe('history-checked soak: replicas with drift, skew, a kill and throws never run a job twice', () => {
  test('four replica processes, five jobs, about 20 s: no duplicate and no unexplained miss', async () => {
    const result = await runSoak({ url: await testDatabaseUrl(), seconds: 20, replicas: 4 })
    assertCleanSoak(result)
  })
})
