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
import type { Page } from 'playwright-core'
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
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 }, timezoneId: 'UTC' })
  await page.goto(`${url}?job=demo%3Aincidents`)
  await page.locator('#strip').waitFor()
  // A picture of a page that does not show what it is for is worse than none: stop instead.
  for (const outcome of ['ok', 'missed', 'error', 'unfinished']) {
    const cells = await page.locator(`#strip [data-outcome="${outcome}"]`).count()
    if (cells === 0) throw new Error(`the strip of demo:incidents shows no '${outcome}' occurrence; nothing written`)
  }
  // Both pictures of one page, one after the other, so they show the same runs. The page refreshes
  // every 5 s: if its text changed meanwhile, both are taken again.
  for (let attempt = 1; ; attempt++) {
    const before = await page.locator('body').textContent()
    const height = await pictureHeight(page)
    for (const colorScheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme })
      const file = `docs/dashboard-${colorScheme}.png`
      await page.screenshot({ path: file, fullPage: true, clip: { x: 0, y: 0, width: 1400, height } })
    }
    if ((await page.locator('body').textContent()) === before) break
    if (attempt === 3) throw new Error('the page of demo:incidents kept changing while it was photographed')
  }
  console.log('wrote docs/dashboard-light.png and docs/dashboard-dark.png')
} finally {
  await (await launched.catch(() => undefined))?.close()
  demo.kill('SIGINT')
  await exited
}

/**
 * Down to the oldest run that went wrong (an error, a run that died, a run after a miss), however
 * many ok runs came after it, as the runs table is newest first; in one call, so no refresh falls
 * between the rows it reads.
 */
async function pictureHeight(page: Page): Promise<number> {
  const bottom = (await page.evaluate(`Math.max(...[...document.querySelectorAll('#runs tbody tr')]
    .filter((row) => row.querySelector('.outcome.error, .outcome.unfinished') || row.cells[6].textContent !== '0')
    .map((row) => row.getBoundingClientRect().bottom + window.scrollY))`)) as number
  if (!Number.isFinite(bottom)) throw new Error('the runs table of demo:incidents shows no run that went wrong')
  return Math.ceil(bottom) + 16
}
