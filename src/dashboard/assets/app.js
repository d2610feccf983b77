// The dashboard page: reads the JSON API (relative URLs, so any base path works) and builds the DOM
// with createElement and textContent only. Nothing from the database is ever parsed as HTML.
;(() => {
  const REFRESH_MS = 5000
  /** Rows drawn at once: with 10,000 jobs the filter narrows them, "Show more" draws the next ones. */
  const PAGE_ROWS = 500
  const STRIP = 60
  const main = document.getElementById('main')
  const stale = document.getElementById('stale')
  const zoneButton = document.getElementById('zone')
  const actions = document.body.dataset.actions === 'true'
  const jobName = new URLSearchParams(location.search).get('job')
  let utc = localStorage.getItem('pg-cron-lease-utc') === '1'
  /** Database clock minus this browser's, from the last reply: relative times follow the database. */
  let skewMs = 0
  let lastGood = null
  let timer = 0
  const view = {
    filter: '',
    sort: 'jobName',
    descending: false,
    shown: PAGE_ROWS,
    leases: [],
    runs: [],
    runsError: null,
  }

  // Control, format (bidi overrides, zero-width) and separator characters, and the backslash, as
  // escapes: a hostile name reads as what it is, and cannot reorder or hide the text around it.
  const visible = (text) =>
    String(text).replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\\]/gu, (c) => {
      const code = c.codePointAt(0)
      if (c === '\\') return '\\\\'
      if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`
      return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`
    })

  function el(tag, props, ...children) {
    const node = document.createElement(tag)
    for (const [key, value] of Object.entries(props ?? {})) {
      if (value === undefined || value === null || value === false) continue
      if (key === 'text') node.textContent = value
      else if (key === 'class') node.className = value
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value)
      else node.setAttribute(key, value === true ? '' : String(value))
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(typeof child === 'string' ? document.createTextNode(child) : child)
      }
    }
    return node
  }

  const SVG = 'http://www.w3.org/2000/svg'
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag)
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value))
    node.append(...children)
    return node
  }

  // Times: the viewer's zone, or UTC one click away; relative to the database clock.
  const local = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' })
  const parse = (iso) => (iso === null || iso === 'infinity' ? Number.NaN : Date.parse(iso))
  function absolute(iso) {
    const ms = parse(iso)
    if (Number.isNaN(ms)) return iso === 'infinity' ? 'until resumed' : '–'
    return utc ? `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC` : local.format(ms)
  }
  function ago(iso) {
    const diff = parse(iso) - (Date.now() + skewMs)
    if (Number.isNaN(diff)) return ''
    const units = [
      ['day', 86_400_000],
      ['hour', 3_600_000],
      ['minute', 60_000],
      ['second', 1000],
    ]
    const [unit, size] = units.find(([, size]) => Math.abs(diff) >= size) ?? units[3]
    return relative.format(Math.round(diff / size), unit)
  }
  function when(iso) {
    if (iso === null || iso === undefined) return el('span', { class: 'none', text: '–' })
    if (iso === 'infinity') return el('span', { text: 'until resumed' })
    return el(
      'time',
      { datetime: iso, title: iso },
      el('span', { text: absolute(iso) }),
      ' ',
      el('small', { text: ago(iso) }),
    )
  }
  function took(ms) {
    if (ms === null || ms === undefined) return '–'
    if (ms < 1000) return `${Math.round(ms)} ms`
    if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`
    return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`
  }

  // A job's states, each a symbol and words: colour is never the only sign.
  function states(l) {
    const found = []
    if (l.lastEndedOutcome === 'error') found.push(['failing', '✖', 'failing'])
    if (l.lastEndedOutcome === 'unfinished') found.push(['died', '✝', 'died'])
    if (l.overdue) found.push(['overdue', '⚠', 'overdue'])
    if (l.paused) {
      found.push([
        'paused',
        '⏸',
        l.pausedUntil === 'infinity' ? 'paused until resumed' : `paused until ${absolute(l.pausedUntil)}`,
      ])
    }
    // Held is not running: a lease outlives its run, which the library tells apart.
    if (l.lastOutcome === 'running') found.push(['running', '▶', 'running'])
    if (found.length === 0) found.push(['idle', '○', 'idle'])
    return found
  }
  const stateCell = (l) =>
    el(
      'span',
      { class: 'states' },
      ...states(l).map(([key, symbol, words]) =>
        el('span', { class: `state ${key}` }, el('span', { 'aria-hidden': 'true', text: symbol }), ` ${words}`),
      ),
    )
  const outcomeOf = (o) =>
    ({
      running: ['▶', 'running'],
      ok: ['✔', 'ok'],
      error: ['✖', 'error'],
      unfinished: ['…', 'unfinished'],
      missed: ['○', 'missed'],
      unknown: ['?', 'unknown'],
    })[o] ?? ['?', String(o ?? 'unknown')]
  const outcomeCell = (o) => {
    if (o === null) return el('span', { class: 'none', text: '–' })
    const [symbol, words] = outcomeOf(o)
    return el('span', { class: `outcome ${o}` }, el('span', { 'aria-hidden': 'true', text: symbol }), ` ${words}`)
  }

  async function getJson(path) {
    const reply = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } })
    if (reply.status === 401) {
      location.reload()
      throw new Error('signed out')
    }
    const body = await reply.json().catch(() => null)
    if (!reply.ok) throw new Error(body?.error ?? `HTTP ${reply.status}`)
    return body
  }

  function markStale(error) {
    stale.hidden = false
    stale.textContent = ''
    const since = lastGood === null ? 'no data yet' : `data from ${absolute(new Date(lastGood).toISOString())}`
    stale.append(
      el('strong', { text: 'Stale: ' }),
      `cannot refresh (${visible(error.message)}); showing ${since}. Retrying every ${REFRESH_MS / 1000} s.`,
    )
  }

  async function refresh() {
    clearTimeout(timer)
    try {
      // A query, not a path segment: a job named '..' would be normalised out of api/jobs/../runs.
      const path = jobName === null ? null : `api/runs?job=${encodeURIComponent(jobName)}&limit=${STRIP}`
      // A history that cannot be read is said on the job's page; only the jobs decide staleness.
      const history = path === null ? Promise.resolve([]) : getJson(path).catch((error) => ({ error }))
      const [leases, runs] = await Promise.all([getJson('api/jobs'), history])
      if (leases.length > 0) skewMs = Date.parse(leases[0].checkedAt) - Date.now()
      view.leases = leases
      view.runs = Array.isArray(runs) ? runs : []
      view.runsError = Array.isArray(runs) ? null : runs.error.message
      lastGood = Date.now() + skewMs
      stale.hidden = true
      render()
    } catch (error) {
      markStale(error)
    }
    timer = setTimeout(refresh, REFRESH_MS)
  }

  // A node's place under main as child indexes. A redraw of the same data puts the same thing at
  // the same place, so the focus and a selection are carried over to it.
  function pathOf(node) {
    const path = []
    for (let at = node; at !== main; at = at.parentNode) {
      if (!at?.parentNode) return null
      path.unshift(Array.prototype.indexOf.call(at.parentNode.childNodes, at))
    }
    return path
  }
  const nodeAt = (path) => path?.reduce((node, i) => node?.childNodes[i], main) ?? null
  const clamp = (node, at) => Math.min(at, node.nodeType === Node.TEXT_NODE ? node.length : node.childNodes.length)

  function render() {
    const active = document.activeElement
    const focused = [pathOf(active), active?.tagName, active?.selectionStart, active?.selectionEnd]
    // Read before the redraw: the live range collapses once its nodes leave the page.
    const range = getSelection().rangeCount > 0 ? getSelection().getRangeAt(0) : null
    const { startContainer: from, startOffset, endContainer: to, endOffset } = range?.collapsed === false ? range : {}
    const marks = from ? [pathOf(from), startOffset, pathOf(to), endOffset] : []
    main.textContent = ''
    main.append(jobName === null ? jobsView() : jobView())
    const [start, end] = [nodeAt(marks[0]), nodeAt(marks[2])]
    if (start && end) getSelection().setBaseAndExtent(start, clamp(start, marks[1]), end, clamp(end, marks[3]))
    const again = nodeAt(focused[0])
    if (again?.tagName !== focused[1]) return
    again.focus({ preventScroll: true })
    if (typeof focused[2] === 'number') again.setSelectionRange(focused[2], focused[3])
  }

  // The jobs page: filter, sort, a table drawn a page of rows at a time.
  const COLUMNS = [
    ['jobName', 'Job'],
    ['state', 'State'],
    ['holder', 'Holder'],
    ['claimedAt', 'Last run started'],
    ['lastDurationMs', 'Took'],
    ['lastOutcome', 'Outcome'],
    ['nextDueAt', 'Next due'],
    ['missed', 'Missed'],
  ]
  const sortKey = (l, key) => (key === 'state' ? states(l)[0][0] : (l[key] ?? ''))
  function jobsView() {
    const needle = view.filter.toLowerCase()
    const matching = view.leases.filter(
      (l) =>
        needle === '' ||
        l.jobName.toLowerCase().includes(needle) ||
        (l.holder ?? '').toLowerCase().includes(needle) ||
        states(l).some(([key]) => key.includes(needle)),
    )
    const sign = view.descending ? -1 : 1
    matching.sort((a, b) => {
      const x = sortKey(a, view.sort)
      const y = sortKey(b, view.sort)
      return (x < y ? -1 : x > y ? 1 : 0) * sign || (a.jobName < b.jobName ? -1 : 1)
    })
    const count = (key) => view.leases.filter((l) => states(l).some(([k]) => k === key)).length
    const summary = ['running', 'failing', 'died', 'overdue', 'paused'].map((key) => `${count(key)} ${key}`).join(', ')
    const filter = el('input', {
      id: 'filter',
      type: 'search',
      placeholder: 'Filter by job, holder or state',
      'aria-label': 'Filter jobs',
      value: view.filter,
      oninput: (event) => {
        view.filter = event.target.value
        view.shown = PAGE_ROWS
        render()
      },
    })
    const header = COLUMNS.map(([key, label]) =>
      el(
        'th',
        { scope: 'col', 'aria-sort': view.sort === key ? (view.descending ? 'descending' : 'ascending') : 'none' },
        el('button', {
          type: 'button',
          text: `${label}${view.sort === key ? (view.descending ? ' ▼' : ' ▲') : ''}`,
          onclick: () => {
            view.descending = view.sort === key ? !view.descending : false
            view.sort = key
            render()
          },
        }),
      ),
    )
    const rows = matching
      .slice(0, view.shown)
      .map((l) =>
        el(
          'tr',
          {},
          el(
            'th',
            { scope: 'row' },
            el('a', { href: `?job=${encodeURIComponent(l.jobName)}`, text: visible(l.jobName) }),
          ),
          el('td', {}, stateCell(l)),
          el('td', { text: l.holder === null ? '–' : visible(l.holder) }),
          el('td', {}, when(l.claimedAt)),
          el('td', { class: 'number', text: took(l.lastDurationMs) }),
          el(
            'td',
            {},
            outcomeCell(l.lastOutcome),
            l.lastFinishedAt === null ? null : el('small', { text: ` ${ago(l.lastFinishedAt)}` }),
          ),
          el('td', {}, when(l.nextDueAt)),
          el('td', { class: `number${l.missed > 0 ? ' missed' : ''}`, text: String(l.missed) }),
          actions ? el('td', {}, buttons(l)) : null,
        ),
      )
    const more =
      matching.length > view.shown
        ? el(
            'p',
            {},
            `Showing ${view.shown} of ${matching.length}. `,
            el('button', {
              type: 'button',
              text: 'Show more',
              onclick: () => {
                view.shown += PAGE_ROWS
                render()
              },
            }),
          )
        : null
    return el(
      'section',
      {},
      el(
        'div',
        { class: 'toolbar' },
        filter,
        el('span', { id: 'count', text: `${matching.length} of ${view.leases.length} jobs: ${summary}` }),
      ),
      view.leases.length === 0
        ? el('p', { text: 'No jobs yet: a job appears after its first claim.' })
        : el(
            'table',
            { id: 'jobs' },
            el('thead', {}, el('tr', {}, header, actions ? el('th', { scope: 'col', text: 'Actions' }) : null)),
            el('tbody', {}, rows),
          ),
      more,
    )
  }

  // A job's page: its state, buttons when allowed, the occurrence strip, the duration chart, its runs.
  function jobView() {
    const lease = view.leases.find((l) => l.jobName === jobName)
    const runs = view.runs
    const parts = [el('p', {}, el('a', { href: './', text: '← All jobs' })), el('h2', { text: visible(jobName) })]
    if (lease === undefined) {
      parts.push(el('p', { text: 'No such job in this table (never claimed, or a typo in the address).' }))
      return el('section', {}, parts)
    }
    parts.push(el('p', {}, stateCell(lease)))
    if (actions) parts.push(el('p', {}, buttons(lease)))
    parts.push(
      el(
        'dl',
        { class: 'facts' },
        fact('Holder', lease.holder === null ? '–' : visible(lease.holder)),
        fact('Last claimed', when(lease.claimedAt)),
        fact('Lease until', when(lease.leaseUntil)),
        fact('Next due', when(lease.nextDueAt)),
        fact('Interval', took(lease.everyMs)),
        fact('Missed in all', String(lease.missed)),
        lease.lastError === null ? null : fact('Last error', visible(lease.lastError)),
      ),
    )
    if (view.runsError !== null) {
      const said = `Cannot read this job's runs: ${visible(view.runsError)}`
      return el('section', {}, parts, el('p', { class: 'unreadable', id: 'runs-error', role: 'alert', text: said }))
    }
    parts.push(el('h3', { text: `Last ${STRIP} occurrences` }), strip(runs), el('h3', { text: 'Run durations' }))
    parts.push(chart(runs), el('h3', { text: 'Runs, newest first' }), runsTable(runs))
    return el('section', {}, parts)
  }
  const fact = (term, value) => [el('dt', { text: term }), el('dd', {}, value)]

  // Shown only when the server allows actions; it refuses them (403) otherwise anyway.
  function buttons(lease) {
    const post = (what) => async () => {
      try {
        const reply = await fetch(`api/jobs/${encodeURIComponent(lease.jobName)}/${what}`, {
          method: 'POST',
          credentials: 'same-origin',
        })
        if (!reply.ok) throw new Error((await reply.json().catch(() => null))?.error ?? `HTTP ${reply.status}`)
        await refresh()
      } catch (error) {
        stale.hidden = false
        stale.textContent = `Could not ${what} ${visible(lease.jobName)}: ${visible(error.message)}`
      }
    }
    const button = (what, label, title) =>
      el('button', {
        type: 'button',
        'data-action': what,
        'aria-label': `${label} ${visible(lease.jobName)}`,
        title,
        text: label,
        onclick: post(what),
      })
    return el(
      'span',
      { class: 'actions' },
      lease.paused
        ? button('resume', 'Resume', 'End the pause: the next claim runs the job')
        : button('pause', 'Pause', 'Pause on every replica until resumed'),
      button('release', 'Release', 'End the current lease now, for a holder that crashed'),
    )
  }

  // Oldest first: each run's `missed` occurrences fell due unclaimed before it, then the run itself.
  function occurrences(runs) {
    const cells = []
    for (const run of [...runs].reverse()) {
      for (let i = 0; i < run.missed; i++)
        cells.push({ outcome: 'missed', label: `missed before the run of ${absolute(run.startedAt)}` })
      cells.push({
        outcome: run.outcome,
        label: `${run.outcome}: ${absolute(run.occurrence ?? run.startedAt)}${run.error ? `: ${visible(run.error)}` : ''}`,
      })
    }
    return cells.slice(-STRIP)
  }
  function strip(runs) {
    const cells = occurrences(runs)
    if (cells.length === 0) return el('p', { text: 'No runs recorded yet.' })
    const legend = ['ok', 'error', 'unfinished', 'missed'].map((o) =>
      el('li', {}, el('span', { class: `cell ${o}`, 'aria-hidden': 'true', text: outcomeOf(o)[0] }), ` ${o}`),
    )
    return el(
      'div',
      {},
      el(
        'ol',
        { class: 'strip', id: 'strip', 'aria-label': 'Occurrences, oldest first' },
        cells.map((c) =>
          el('li', {
            class: `cell ${c.outcome}`,
            title: c.label,
            'data-outcome': c.outcome,
            text: outcomeOf(c.outcome)[0],
          }),
        ),
      ),
      el('ul', { class: 'legend' }, legend),
    )
  }

  function chart(runs) {
    const timed = [...runs].reverse().filter((r) => r.durationMs !== null)
    if (timed.length === 0) return el('p', { text: 'No finished runs yet.' })
    const width = 600
    const height = 120
    const max = Math.max(...timed.map((r) => r.durationMs), 1)
    const bar = width / timed.length
    const bars = timed.map((r, i) => {
      const h = Math.max(1, (r.durationMs / max) * (height - 20))
      const rect = svg('rect', {
        x: (i * bar + 1).toFixed(1),
        y: (height - h).toFixed(1),
        width: Math.max(1, bar - 2).toFixed(1),
        height: h.toFixed(1),
        class: r.outcome,
      })
      rect.append(svg('title', {}, `${absolute(r.startedAt)}: ${took(r.durationMs)} (${r.outcome})`))
      return rect
    })
    return svg(
      'svg',
      {
        viewBox: `0 0 ${width} ${height}`,
        class: 'chart',
        id: 'chart',
        role: 'img',
        'aria-label': `Durations of the last ${timed.length} runs; longest ${took(max)}`,
      },
      svg('text', { x: 2, y: 12, class: 'label' }, `max ${took(max)}`),
      svg('line', { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: 'axis' }),
      ...bars,
    )
  }
  function runsTable(runs) {
    if (runs.length === 0) return el('p', { text: 'No runs recorded yet.' })
    const head = ['Started', 'Finished', 'Took', 'Outcome', 'Holder', 'Occurrence', 'Missed before', 'Error']
    return el(
      'table',
      { id: 'runs' },
      el('thead', {}, el('tr', {}, ...head.map((h) => el('th', { scope: 'col', text: h })))),
      el(
        'tbody',
        {},
        runs.map((r) =>
          el(
            'tr',
            {},
            el('td', {}, when(r.startedAt)),
            el('td', {}, when(r.finishedAt)),
            el('td', { class: 'number', text: took(r.durationMs) }),
            el('td', {}, outcomeCell(r.outcome), r.catchUp ? el('small', { text: ' catch-up' }) : null),
            el('td', { text: r.holder === null ? '–' : visible(r.holder) }),
            el('td', {}, r.occurrence === null ? '–' : when(r.occurrence)),
            el('td', { class: 'number', text: String(r.missed) }),
            el('td', { class: 'error', text: r.error === null ? '' : visible(r.error) }),
          ),
        ),
      ),
    )
  }
  function showZone() {
    zoneButton.textContent = utc ? 'Show local time' : 'Show UTC'
    zoneButton.setAttribute('aria-pressed', String(utc))
  }
  zoneButton.addEventListener('click', () => {
    utc = !utc
    localStorage.setItem('pg-cron-lease-utc', utc ? '1' : '0')
    showZone()
    render()
  })
  showZone()
  refresh()
})()
