/**
 * Preloaded into every test file's process by scripts/test.ts: a DeprecationWarning from `pg`
 * (what `pg` 9 removes, such as queueing a query behind a running one) fails the file, so no such
 * warning can come back unseen.
 */
process.on('warning', (warning) => {
  if (warning.name !== 'DeprecationWarning' || !/\bpg@9\b/.test(warning.message)) return
  process.exitCode = 1
  console.error(`# this file fails: pg warned that ${warning.message}\n${warning.stack ?? ''}`)
})
