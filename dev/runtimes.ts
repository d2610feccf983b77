/**
 * The runtimes besides Node that the packed tarball is run under (scripts/runtimes.ts), each from
 * its npm package, and the verdict on what dev/runtime-race.mjs printed there.
 */

/** A runtime: its npm package, pinned, and how it runs a script file. */
export interface Runtime {
  name: 'bun' | 'deno'
  /** The npm package it is installed from, at the version docs/compatibility.md names. */
  spec: string
  /** The command in the package's `node_modules/.bin`. */
  bin: string
  args(file: string): string[]
}

/**
 * Bun and Deno, at the versions CI runs. Deno is given only what the race needs: the environment
 * (DATABASE_URL), the network (the server), and reading files (the installed packages).
 *
 * @example
 * for (const runtime of RUNTIMES) console.log(runtime.spec)
 */
export const RUNTIMES: readonly Runtime[] = [
  { name: 'bun', spec: 'bun@1.4.5', bin: 'bun', args: (file) => [file] },
  {
    name: 'deno',
    spec: 'deno@2.9.6',
    bin: 'deno',
    args: (file) => ['run', '--allow-env', '--allow-net', '--allow-read', '--allow-sys', file],
  },
]

/**
 * What dev/runtime-race.mjs prints: the runtime that ran it and, for each round, who won, how many
 * ticks ran, and the holder the database kept.
 *
 * @example
 * const report: RaceReport = { runtime: 'bun 1.4.5', claimants: 10, rounds: [{ winners: ['claimant-3'], runs: 1, holder: 'claimant-3' }] }
 */
export interface RaceReport {
  runtime: string
  claimants: number
  rounds: Array<{ winners: string[]; runs: number; holder: string | null }>
}

/**
 * The race's problems, judged from the script's output: none when `runtime` ran it, ten claimants
 * raced in every round, and each round had exactly one winner, one run, and that winner's name in
 * the row. An empty list is a pass.
 *
 * @example
 * judgeRace('bun', stdout) // [] or ['round 4: 2 winners (claimant-1, claimant-7)']
 */
export function judgeRace(runtime: Runtime['name'], output: string): string[] {
  const last = output.trim().split('\n').at(-1) ?? ''
  let report: RaceReport
  try {
    report = JSON.parse(last) as RaceReport
  } catch {
    return [`no report: the last line printed is not JSON: ${JSON.stringify(last.slice(0, 200))}`]
  }
  const problems: string[] = []
  // A shim that falls back to Node would pass the race and prove nothing about the runtime.
  if (typeof report.runtime !== 'string' || !report.runtime.startsWith(`${runtime} `))
    problems.push(`ran under ${JSON.stringify(report.runtime)}, not ${runtime}`)
  if (report.claimants !== 10) problems.push(`${report.claimants} claimants, not 10`)
  if (!Array.isArray(report.rounds) || report.rounds.length === 0) return [...problems, 'no rounds were raced']
  report.rounds.forEach((round, i) => {
    const n = i + 1
    if (round.winners.length !== 1)
      problems.push(`round ${n}: ${round.winners.length} winners (${round.winners.join(', ') || 'none'})`)
    if (round.runs !== 1) problems.push(`round ${n}: the tick ran ${round.runs} times`)
    if (round.winners.length === 1 && round.holder !== round.winners[0])
      problems.push(`round ${n}: the row names ${round.holder}, the winner was ${round.winners[0]}`)
  })
  return problems
}
