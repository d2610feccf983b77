/**
 * `npm run docs:screenshots`: the dashboard's pictures in docs/, from the demo's data. Runs the
 * demo's lease mode with `--dashboard`, whose replicas then go on running jobs claimed by
 * occurrence, one of them (`demo:incidents`) with a miss, an error and a run whose replica was
 * killed mid-tick. Photographs that job's page (its lease, occurrence strip, durations and runs)
 * in light and in dark mode with headless Chromium (dev/browser.ts finds it), and stops the demo,
 * which removes its database. Rerun it whenever the page or the demo changes.
 *
 *   npm run docs:screenshots
 */
import { spawn } from 'node:child_process'
import { launchBrowser } from '../dev/browser.ts'

const demo = spawn(
  process.execPath,
  ['--import', 'tsx', 'scripts/demo.ts', '--mode', 'lease', '--seconds', '20', '--dashboard', '--dashboard-port', '0'],
  { env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'inherit'] },
)
const exited = new Promise<void>((resolve) => demo.once('exit', () => resolve()))
// Started while the demo runs: the sooner the pictures are taken once the incidents are over, the
// more of them the runs table (newest first) still shows.
const launched = launchBrowser()
let output = ''
const served = new Promise<string>((resolve, reject) => {
  demo.stdout.on('data', (chunk) => {
    output += chunk
    const found = /Dashboard of the demo's table: (\S+)/.exec(output)?.[1]
    if (found) resolve(found)
  })
  demo.once('exit', () => reject(new Error(`the demo exited before serving the dashboard:\n${output}`)))
})

try {
  const [browser, url] = await Promise.all([launched, served])
  // Both pages loaded first, then both photographed: they show the same runs, fetched a moment
  // apart, rather than the dark one a second's runs later.
  const pages = await Promise.all(
    (['light', 'dark'] as const).map(async (colorScheme) => {
      // Tall and wide enough for the runs that went wrong in the runs table.
      const page = await browser.newPage({ colorScheme, viewport: { width: 1400, height: 1100 }, timezoneId: 'UTC' })
      await page.goto(`${url}?job=demo%3Aincidents`)
      await page.locator('#strip').waitFor()
      // A picture of a page that does not show what it is for is worse than none: stop instead.
      for (const outcome of ['ok', 'missed', 'error', 'unfinished']) {
        const cells = await page.locator(`#strip [data-outcome="${outcome}"]`).count()
        if (cells === 0)
          throw new Error(`the strip of demo:incidents shows no '${outcome}' occurrence; nothing written`)
      }
      return { page, file: `docs/dashboard-${colorScheme}.png` }
    }),
  )
  for (const { page, file } of pages) {
    await page.screenshot({ path: file, fullPage: false })
    console.log(`wrote ${file}`)
  }
} finally {
  await (await launched.catch(() => undefined))?.close()
  demo.kill('SIGINT')
  await exited
}
