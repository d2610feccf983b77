/**
 * The NestJS subpath without a database: @Leased()'s argument checks and start-up errors, the
 * lease derived from a schedule, the slots of a time-zoned @Cron across DST against the `cron`
 * package's own CronTime, and the core entry point loading no NestJS package.
 */
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { Injectable, Module } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule'
import { CronJob, CronTime } from 'cron'
import { CI } from '../../dev/postgres.ts'
import { Leased, PgCronLeaseModule } from '../../src/nestjs/index.ts'
import { cronLeaseMs, SCHEDULE_METADATA, scheduleOf } from '../../src/nestjs/runner.ts'
import { type CronPackageJob, cronJobSlot } from '../../src/scheduler-slot.ts'
import { NESTJS_MAJOR } from '../helpers/nestjs-major.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
const HOUR = 3_600_000

// A database that is never reached: every claim would fail loudly.
const nowhere = {
  query() {
    throw new Error('no database in the unit tests')
  },
}

async function start(...providers: (new () => object)[]) {
  @Module({ imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db: nowhere })], providers })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false })
  await app.close()
}

describe('@Leased() checks its options when the class is defined', () => {
  for (const [options, pattern] of [
    [{ leaseMs: 0 }, /@Leased\(\) options\.leaseMs must be at least 1 ms \(after rounding\), got 0$/],
    [{ leaseMs: 0.4 }, /@Leased\(\) options\.leaseMs must be at least 1 ms \(after rounding\), got 0\.4/],
    [{ leaseMs: 2147483647.5 }, /@Leased\(\) options\.leaseMs must be at most 2147483647 ms, got 2147483647\.5/],
    [{ leaseMs: '800' }, /@Leased\(\) options\.leaseMs must be a finite number of milliseconds, got "800"/],
    [
      { catchUp: { withinMs: -1 } },
      /@Leased\(\) options\.catchUp\.withinMs must be at least 1 ms \(after rounding\), got -1/,
    ],
    [{ catchUp: 60_000 }, /@Leased\(\) options\.catchUp must be an object, got 60000/],
    [
      { leasMs: 800 },
      /@Leased\(\) options\.leasMs must be one of the known options \(leaseMs, catchUp\), got "leasMs"/,
    ],
    ['800', /@Leased\(\) options must be an object, got "800"/],
  ] as const) {
    test(`${JSON.stringify(options)}: a TypeError naming it`, () => {
      assert.throws(() => Leased(options as never), { name: 'TypeError', message: pattern })
    })
  }

  test('on a method twice: a TypeError', () => {
    assert.throws(
      () => {
        class Twice {
          @Leased()
          @Leased()
          tick() {}
        }
        return Twice
      },
      { name: 'TypeError', message: /@Leased\(\) is on Twice.tick twice/ },
    )
  })
})

describe('a leased method that cannot run is a start-up error, not a silent no-op', () => {
  test('a leased @Cron in an application without ScheduleModule stops it: nothing would fire it', async () => {
    @Injectable()
    class Unscheduled {
      @Leased()
      @Cron('0 * * * * *', { name: 'unscheduled' })
      tick() {}
    }
    @Module({ imports: [PgCronLeaseModule.forRoot({ db: nowhere })], providers: [Unscheduled] })
    class NoScheduleModule {}
    await assert.rejects(
      NestFactory.createApplicationContext(NoScheduleModule, { logger: false }),
      /Unscheduled\.tick is a leased @Cron, but the application has no SchedulerRegistry: import ScheduleModule\.forRoot\(\)/,
    )
  })

  test('@Leased() with no @Cron, @Interval or @Timeout stops the application, naming the method', async () => {
    @Injectable()
    class Forgotten {
      @Leased()
      tick() {}
    }
    await assert.rejects(start(Forgotten), /Forgotten\.tick has @Leased\(\) but no @Cron, @Interval or @Timeout/)
  })

  test('two leased methods under one job name stop the application, naming both', async () => {
    // A @Cron and an @Interval: @nestjs/schedule keeps each kind's names apart, so only the runner
    // sees the clash, on every major.
    @Injectable()
    class Twins {
      @Cron('0 * * * * *', { name: 'same' })
      @Leased()
      a() {}
      @Interval('same', 2000)
      @Leased()
      b() {}
    }
    await assert.rejects(start(Twins), /Twins\.a and Twins\.b are both leased as job "same"/)
  })

  test('two leased @Interval under one name stop the application', async () => {
    // @nestjs/schedule 12 refuses a name twice within a kind itself, in a hook that runs before the
    // runner's: then its message is the one that stops the start.
    @Injectable()
    class Twins {
      @Interval('same', 1000)
      @Leased()
      a() {}
      @Interval('same', 2000)
      @Leased()
      b() {}
    }
    const message =
      NESTJS_MAJOR >= 12
        ? /Interval with the given name \(same\) already exists/
        : /Twins\.a and Twins\.b are both leased as job "same"/
    await assert.rejects(start(Twins), message)
  })

  test('catchUp on a @Timeout stops the application: it never falls due again', async () => {
    @Injectable()
    class Once {
      @Timeout(60_000)
      @Leased({ catchUp: { withinMs: 1000 } })
      warm() {}
    }
    await assert.rejects(start(Once), /Once\.warm is a @Timeout, .* remove catchUp/)
  })

  test('a well-formed leased class starts and stops, with @Leased() above or below the schedule', async () => {
    @Injectable()
    class Fine {
      @Leased()
      @Cron('0 0 * * * *')
      hourly() {}
      @Interval(3_600_000)
      @Leased({ leaseMs: 1000 })
      sweep() {}
    }
    await start(Fine)
  })
})

describe("@nestjs/schedule's metadata, read by the keys' values (its root exports none of them)", () => {
  test('@Cron, @Interval and @Timeout set exactly the keys scheduleOf reads, with the values it expects', () => {
    class Scheduled {
      @Cron('0 * * * * *', { name: 'c' })
      cron() {}
      @Interval('i', 1500)
      interval() {}
      @Timeout(2500)
      timeout() {}
    }
    const { prototype } = Scheduled
    const keys = (fn: object) => Reflect.getOwnMetadataKeys(fn).sort()
    const { type, name, cron, interval, timeout } = SCHEDULE_METADATA
    assert.deepEqual(keys(prototype.cron), [cron, name, type].sort())
    assert.deepEqual(keys(prototype.interval), [interval, name, type].sort())
    assert.deepEqual(keys(prototype.timeout), [timeout, name, type].sort())
    assert.deepEqual(scheduleOf(prototype.cron), {
      kind: 'cron',
      name: 'c',
      options: Reflect.getMetadata(cron, prototype.cron),
    })
    assert.equal(Reflect.getMetadata(cron, prototype.cron).cronTime, '0 * * * * *')
    assert.deepEqual(scheduleOf(prototype.interval), { kind: 'interval', name: 'i', ms: 1500 })
    assert.deepEqual(scheduleOf(prototype.timeout), { kind: 'timeout', name: undefined, ms: 2500 })
    assert.equal(
      scheduleOf(() => {}),
      null,
    )
  })
})

/** A job of the cron package, never started, whose last fire was at `firedMs`. */
function firedJob(expression: string, timeZone: string, firedMs: number): CronPackageJob {
  const job = CronJob.from({ cronTime: expression, timeZone, onTick() {}, start: false })
  job.lastExecution = new Date(firedMs)
  return job as unknown as CronPackageJob
}

/** The fires CronTime lists for `expression` in `timeZone`, from `fromIso` on, as epoch ms. */
function fires(expression: string, timeZone: string, fromIso: string, count: number): number[] {
  const time = new CronTime(expression, timeZone)
  const list: number[] = []
  let at = time.getNextDateFrom(new Date(fromIso), timeZone) // a Date alone would be read in the system's zone
  for (let i = 0; i < count; i++) {
    list.push(at.toMillis())
    at = time.getNextDateFrom(at)
  }
  return list
}

describe('the lease derived from the schedule: 80% of the shortest gap', () => {
  for (const [expression, expected] of [
    ['* * * * * *', 800],
    ['*/15 * * * * *', 12_000],
    ['0 0 * * * *', Math.round(0.8 * HOUR)],
    ['0 0 9 * * 1-5', Math.round(0.8 * 24 * HOUR)], // weekdays: the weekday gap, not Friday to Monday
    ['0 0 8,9 * * *', Math.round(0.8 * HOUR)], // twice a day, an hour apart: the short gap
  ] as const) {
    test(`${expression}: ${expected} ms`, () => {
      const job = firedJob(expression, 'UTC', Date.now())
      assert.equal(cronLeaseMs(job), expected)
    })
  }

  test('a daily job in a zone whose day shrinks to 23 hours in the fires looked at: 80% of 23 hours', () => {
    const job = firedJob('0 30 1 * * *', 'America/New_York', Date.now())
    const time = job.cronTime.getNextDateFrom(new Date('2026-03-01T00:00:00Z'), 'America/New_York')
    assert.equal(cronLeaseMs(job, time), Math.round(0.8 * 23 * HOUR))
  })
})

describe('a time-zoned @Cron across a DST change: each fire names the slot CronTime lists', () => {
  for (const [expression, timeZone, fromIso, what] of [
    ['0 30 * * * *', 'America/New_York', '2026-03-08T04:00:00Z', 'hourly at :30, New York springing forward'],
    ['0 30 * * * *', 'America/New_York', '2026-11-01T03:00:00Z', 'hourly at :30, New York falling back'],
    ['0 0 2 * * *', 'Europe/Berlin', '2026-03-27T00:00:00Z', 'daily at 02:00, Berlin skipping that hour'],
    ['0 */20 * * * *', 'Europe/Berlin', '2026-10-25T00:00:00Z', 'every 20 minutes, Berlin repeating an hour'],
    ['0 0 9 * * *', 'Australia/Lord_Howe', '2026-04-04T00:00:00Z', 'daily, a half-hour DST shift'],
  ] as const) {
    test(what, () => {
      const slots = fires(expression, timeZone, fromIso, 8)
      for (const [i, slot] of slots.entries()) {
        const next = slots[i + 1] ?? null
        // On time, a little late, and late by nearly the whole gap: the slot is the same.
        const gap = next === null ? 1000 : next - slot
        for (const lateMs of [0, 7, 250, gap - 1]) {
          const named = cronJobSlot(firedJob(expression, timeZone, slot + lateMs))
          assert.equal(
            named.occurrence === null ? null : new Date(named.occurrence).toISOString(),
            new Date(slot).toISOString(),
            `fired ${lateMs} ms after ${new Date(slot).toISOString()}`,
          )
        }
      }
    })
  }
})

describe("importing 'pg-cron-lease' loads no NestJS package", () => {
  // Run in a child, so nothing this test file imported counts. The NestJS packages are CommonJS,
  // and Node loads CommonJS through Module._cache even when an ES module imports it, so the cache
  // lists them whichever way they were reached; the subpath is the control that shows it does.
  const loaded = (entry: string, flags: string[] = []) =>
    JSON.parse(
      execFileSync(
        process.execPath,
        [
          ...flags,
          '--input-type=module',
          '-e',
          `import { createRequire } from 'node:module'
           await import(${JSON.stringify(entry)})
           const cache = createRequire(import.meta.url)('node:module')._cache
           console.log(JSON.stringify(Object.keys(cache).filter((f) => f.includes('/node_modules/@nestjs/'))))`,
        ],
        { cwd: root, encoding: 'utf8' },
      ),
    ) as string[]

  test('src/index.ts under tsx: none; src/nestjs/index.ts: @nestjs/common and the rest', () => {
    assert.deepEqual(loaded(`${root}src/index.ts`, ['--import', 'tsx']), [])
    assert.ok(loaded(`${root}src/nestjs/index.ts`, ['--import', 'tsx']).some((f) => f.includes('/@nestjs/common/')))
  })

  const built = existsSync(`${root}dist/index.mjs`) && existsSync(`${root}dist/nestjs.mjs`)
  test('the build, by import and by require: none; its nestjs entry: @nestjs/common', {
    skip: !built && !CI && 'no dist/: run npm run build',
  }, () => {
    assert.ok(built, 'dist/ is missing: CI builds before it tests')
    assert.deepEqual(loaded(`${root}dist/index.mjs`), [])
    assert.deepEqual(loaded(`${root}dist/index.cjs`), [])
    assert.ok(loaded(`${root}dist/nestjs.mjs`).some((f) => f.includes('/@nestjs/common/')))
    assert.ok(loaded(`${root}dist/nestjs.cjs`).some((f) => f.includes('/@nestjs/common/')))
  })
})
