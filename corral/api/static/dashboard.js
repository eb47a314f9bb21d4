// corral dashboard: polls the authenticated REST API and renders pools, runners, jobs, waits and failures.
// Everything is built with DOM calls and textContent, never innerHTML: job labels, repository names and
// failure reasons come from outside corral and must not be able to inject markup.
"use strict";

(() => {
  const POLL_MS = 1500;
  const STALE_MS = 6000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const POOL_COLORS = ["#2f6fde", "#8e44ad", "#e67e22", "#16a085", "#c0392b", "#7f8c8d", "#d35400", "#27ae60"];
  const LIVE_STATES = ["pending", "creating", "booting", "idle", "busy", "finished", "failed", "deleting"];
  const MAX_RUNNER_ROWS = 60;
  const JOB_ROWS = 25;
  const CHART_JOBS = 80;

  const $ = (id) => document.getElementById(id);
  let lastSuccess = 0;
  let timer = null;
  let poolColors = new Map();
  let selectedJob = null; // {kind: "job" | "scale-set-job", id}
  let signedIn = false; // a poll succeeded since the page loaded or the form signed in
  const STORY_PATHS = { job: "api/v1/jobs", "scale-set-job": "api/v1/scale-set-jobs" };

  // -- signing in: the form posts the token once; corral keeps it in an HttpOnly cookie ---------------
  // The page never holds the token after that (scripts cannot read the cookie), and never reads one from
  // the URL, where browser history and proxy logs would keep it.

  async function signIn(value) {
    const response = await fetch("dashboard/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: value }),
      cache: "no-store",
    });
    if (response.status === 401) throw new Unauthorized("the token was refused");
    if (response.status === 403) throw new Unauthorized("this token's scope cannot read the API");
    if (!response.ok) throw new Error(`signing in: HTTP ${response.status}`);
  }

  async function signOut() {
    await fetch("dashboard/session", { method: "DELETE", cache: "no-store" });
  }

  function showLogin(message) {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    $("board").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setConnection("no token", "pill-plain");
    $("overview").textContent = "";
    $("token-input").focus();
  }

  function start() {
    $("login").hidden = true;
    $("board").hidden = false;
    $("forget").hidden = false;
    poll();
  }

  // -- small DOM helpers ----------------------------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key === "style") node.style.cssText = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function stateBadge(state, count) {
    const badge = el("span", { class: `state s-${state}` }, state);
    if (count !== undefined) badge.append(" ", el("b", {}, count));
    return badge;
  }

  function fillTable(tableId, emptyId, rows) {
    const body = document.querySelector(`#${tableId} tbody`);
    body.replaceChildren(...rows);
    $(tableId).hidden = rows.length === 0;
    $(emptyId).hidden = rows.length !== 0;
  }

  function setConnection(text, cls) {
    const pill = $("connection");
    pill.textContent = text;
    pill.className = `pill ${cls}`;
  }

  // -- formatting -----------------------------------------------------------------------------------

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (value < 10) return `${value.toFixed(1)} s`;
    if (value < 120) return `${Math.round(value)} s`;
    if (value < 7200) return `${Math.round(value / 60)} min`;
    return `${Math.round(value / 3600)} h`;
  }

  function tickLabel(value) {
    return value < 10 ? `${Number(value.toFixed(2))} s` : seconds(value);
  }

  function since(iso) {
    return seconds(Math.max(0, (Date.now() - Date.parse(iso)) / 1000));
  }

  function clock(iso) {
    return iso ? new Date(iso).toLocaleTimeString([], { hour12: false }) : "–";
  }

  function waitOf(job) {
    if (!job.queued_at || !job.started_at) return null;
    return Math.max(0, (Date.parse(job.started_at) - Date.parse(job.queued_at)) / 1000);
  }

  function colorOf(pool) {
    return poolColors.get(pool) || "var(--gone)";
  }

  // -- rendering ------------------------------------------------------------------------------------

  function renderOverview(summary) {
    const live = Object.values(summary.runners).reduce((a, b) => a + b, 0);
    const jobs = summary.jobs;
    $("overview").replaceChildren(
      el("b", {}, summary.pools.length), " pools · ",
      el("b", {}, live), " live runners · ",
      el("b", {}, jobs.queued || 0), " queued, ",
      el("b", {}, jobs.in_progress || 0), " running, ",
      el("b", {}, jobs.completed || 0), " completed jobs · config generation ",
      el("b", {}, summary.generation),
      ...quotaLeft(summary.quota_headroom_by_cloud || {}),
    );
  }

  // Each cloud's quota headroom per limited resource, as corral last read it (named when there are several).
  function quotaLeft(byCloud) {
    const clouds = Object.keys(byCloud).sort();
    const parts = [];
    clouds.forEach((cloud) => {
      const headroom = byCloud[cloud];
      const names = Object.keys(headroom).sort();
      if (!names.length) return;
      parts.push(clouds.length > 1 ? ` · quota left in ${cloud}: ` : " · quota left: ");
      names.forEach((name, i) =>
        parts.push(el("b", {}, headroom[name]), ` ${name.replace("_mb", " MiB")}${i < names.length - 1 ? ", " : ""}`),
      );
    });
    return parts;
  }

  function renderPools(pools) {
    poolColors = new Map(pools.map((pool, i) => [pool.name, POOL_COLORS[i % POOL_COLORS.length]]));
    const cards = pools.map((pool) => {
      const status = pool.ready
        ? el("span", { class: "pill pill-ok" }, "ready")
        : el("span", { class: "pill pill-bad" }, "not ready");
      const capacity = Math.max(pool.max_runners, pool.starting + pool.idle + pool.busy + pool.failed, 1);
      const segment = (count, color, what) =>
        el("span", { style: `width:${(100 * count) / capacity}%;background:${color}`, title: `${count} ${what}` });
      return el(
        "article",
        { class: "pool", style: `--pool-color:${colorOf(pool.name)}`, "data-pool": pool.name },
        el(
          "div",
          { class: "pool-head" },
          el("span", { class: "pool-name" }, pool.name),
          pool.default ? el("span", { class: "pill pill-plain" }, "default") : null,
          pool.drained ? el("span", { class: "pill pill-wait" }, "drained") : null,
          pool.removed ? el("span", { class: "pill pill-wait" }, "removed") : null,
          status,
        ),
        pool.ready ? null : el("p", { class: "pool-reason" }, pool.reason || "not ready"),
        el(
          "div",
          { class: "pool-figures" },
          ...[
            ["desired", pool.desired],
            ["idle", pool.idle],
            ["busy", pool.busy],
            ["starting", pool.starting],
            ["failed", pool.failed],
          ].map(([name, value]) => el("div", { "data-figure": name }, el("b", {}, value), el("span", {}, name))),
        ),
        el(
          "div",
          { class: "bar", title: `${pool.max_runners} at most` },
          segment(pool.busy, "var(--busy)", "busy"),
          segment(pool.idle, "var(--idle)", "idle"),
          segment(pool.starting, "var(--starting)", "starting"),
          segment(pool.failed, "var(--bad)", "failed"),
        ),
        el(
          "p",
          { class: "pool-foot" },
          `${pool.queued_jobs} queued · min idle ${pool.min_idle}` +
            (pool.min_idle_next_change ? ` (${pool.min_idle_next} at ${clock(pool.min_idle_next_change)})` : "") +
            (pool.min_idle_auto ? ` (auto: ${pool.min_idle_auto.reason})` : "") +
            ` · max ${pool.max_runners}`,
          pool.deleting ? ` · ${pool.deleting} deleting` : "",
          pool.held_by ? ` · held by ${pool.held_by}` : "",
          pool.quota_fits === null || pool.quota_fits === undefined
            ? ""
            : ` · quota: room for ${pool.quota_fits} more (${pool.quota_limited_by.join(", ")})`,
          pool.quota_short && pool.quota_short.length
            ? ` · waiting for quota (${pool.quota_short.join(", ")})`
            : "",
          rolloutText(pool.rollout),
          ...Object.entries(pool.placement_rollouts || {}).map(([key, rollout]) => rolloutText(rollout, key)),
          cacheText(pool.cache_volumes),
          pool.intake === "scale_set"
            ? ` · scale set ${pool.scale_set_id ?? "?"}, session ${pool.session ?? "on its holder"}` +
                (pool.job_messages === null ? "" : `, ${pool.job_messages} job messages, ${pool.recoveries} recoveries`) +
                (pool.listener_restarts ? `, ${pool.listener_restarts} listener restarts` : "") +
                (pool.session_error
                  ? `, ${pool.session === "listening" ? "last error" : "failing"} since ` +
                    `${clock(pool.session_error_since)}: ${pool.session_error}`
                  : "")
            : "",
        ),
      );
    });
    $("pools").replaceChildren(...cards);
  }

  /** A pool's cache volumes in a few words: how many hold a server, how many are free, and how its runners started. */
  function cacheText(cache) {
    if (!cache) return "";
    const left = cache.creating + cache.held + cache.free + cache.deleting;
    if (!cache.max) return ` · cache volumes: ${left} left, being deleted`;
    const started = cache.warm_share === null ? "no runner yet" : `${Math.round(cache.warm_share * 100)}% started warm`;
    return ` · cache volumes: ${cache.creating + cache.held} in use, ${cache.free} free, of ${cache.max} (${started})`;
  }

  /** A pool's image rollout in a few words: which image (in which placement), how far it got (ids shortened). */
  function rolloutText(rollout, placement) {
    if (!rollout) return "";
    const to = rollout.to_image.slice(0, 8) + (placement ? ` in ${placement}` : "");
    if (rollout.phase === "rolled_back") return ` · image ${to} rolled back (${rollout.failed} failed to boot)`;
    if (rollout.phase === "canary") {
      return ` · canary image ${to}: ${rollout.jobs_succeeded} of ${rollout.canary_jobs} jobs succeeded`;
    }
    return ` · rolling out image ${to} (${rollout.online} online, ${rollout.failed} failed)`;
  }

  function renderRunners(counts, runners) {
    $("runner-states").replaceChildren(...LIVE_STATES.map((state) => stateBadge(state, counts[state] || 0)));
    const order = new Map(LIVE_STATES.map((state, i) => [state, i]));
    const sorted = [...runners].sort(
      (a, b) => a.pool.localeCompare(b.pool) || order.get(a.state) - order.get(b.state) || a.name.localeCompare(b.name),
    );
    const rows = sorted.slice(0, MAX_RUNNER_ROWS).map((runner) =>
      el(
        "tr",
        { "data-state": runner.state },
        el("td", { class: "mono" }, runner.name),
        el("td", {}, runner.pool),
        el("td", {}, stateBadge(runner.state)),
        el("td", { class: "num" }, since(runner.state_changed_at)),
      ),
    );
    if (sorted.length > MAX_RUNNER_ROWS) {
      rows.push(el("tr", {}, el("td", { class: "more", colspan: "4" }, `and ${sorted.length - MAX_RUNNER_ROWS} more`)));
    }
    fillTable("runners", "runners-empty", rows);
  }

  function renderJobs(jobs, tableId = "jobs", kind = "job") {
    const rows = jobs.slice(0, JOB_ROWS).map((job) =>
      el(
        "tr",
        {},
        el("td", { class: "mono" }, jobLink(kind, job.id)),
        el("td", {}, job.repository),
        el("td", { class: "labels" }, job.labels.join(", ")),
        el("td", {}, job.pool || "unmatched"),
        el("td", {}, stateBadge(job.status)),
        el("td", { class: "num" }, seconds(waitOf(job))),
        el("td", { class: "num" }, clock(job.queued_at)),
      ),
    );
    fillTable(tableId, `${tableId}-empty`, rows);
  }

  // Scale-set jobs (known by GitHub's runner request id) have a table of their own, shown when there are any.
  function renderScaleSetJobs(jobs) {
    $("scale-set-jobs-section").hidden = jobs.length === 0;
    renderJobs(jobs, "scale-set-jobs", "scale-set-job");
  }

  function jobLink(kind, id) {
    const link = el("button", { type: "button", class: "link-button mono", title: "timeline and why it waits" }, id);
    link.addEventListener("click", () => {
      selectedJob = { kind, id };
      window.history.replaceState(null, "", `#${kind}=${id}`);
      poll();
    });
    return link;
  }

  // A job corral does not know (a mistyped link) is said so in the panel rather than failing the poll.
  async function jobStory({ kind, id }) {
    try {
      return { kind, ...(await get(`${STORY_PATHS[kind]}/${id}`)) };
    } catch (error) {
      if (error instanceof Unauthorized) throw error;
      return { kind, id, missing: error.message, timeline: [] };
    }
  }

  // One job's story: what holds it while it waits, and its timeline from the delivery to completion.
  function renderJobStory(story) {
    const panel = $("job-story");
    panel.hidden = story === null;
    if (story === null) return;
    const what = story.kind === "scale-set-job" ? "Scale-set job request" : "Job";
    if (story.missing) {
      $("job-story-title").textContent = `${what} ${story.id}: ${story.missing}`;
      $("job-story-waiting").textContent = "";
      fillTable("job-story-timeline", "job-story-empty", []);
      return;
    }
    $("job-story-title").textContent = `${what} ${story.id}: ${story.repository}, ${story.status}, ${story.pool || "no pool"}`;
    const waiting = $("job-story-waiting");
    waiting.textContent = "";
    if (story.waiting) {
      waiting.append(el("b", {}, story.waiting.code), `: ${story.waiting.sentence}`);
    }
    const rows = story.timeline.map((entry) =>
      el("tr", {}, el("td", { class: "num", title: entry.at }, clock(entry.at)), el("td", {}, entry.event), el("td", { class: "reason" }, entry.detail)),
    );
    fillTable("job-story-timeline", "job-story-empty", rows);
  }

  function renderFailures(failures) {
    const rows = failures.map((failure) =>
      el(
        "tr",
        {},
        el("td", { class: "num", title: failure.at }, `${since(failure.at)} ago`),
        el("td", {}, el("span", { class: "mono" }, failure.runner_name), el("br"), `${failure.pool}, was ${failure.from_state || "new"}`),
        el("td", { class: "reason" }, failure.reason),
      ),
    );
    fillTable("failures", "failures-empty", rows);
  }

  // A y axis that ends on a round number with round ticks: 1, 2 or 5 times a power of ten.
  function niceScale(value) {
    const power = 10 ** Math.floor(Math.log10(Math.max(value, 1)));
    for (const factor of [1, 2, 5, 10]) {
      if (factor * power >= value) return { ceiling: factor * power, ticks: factor === 2 ? 4 : 5 };
    }
    return { ceiling: 10 * power, ticks: 5 };
  }

  function renderLatency(jobs, wait) {
    $("wait-figures").replaceChildren(
      "median ", el("b", {}, seconds(wait.median_s)),
      " · p90 ", el("b", {}, seconds(wait.p90_s)),
      " · max ", el("b", {}, seconds(wait.max_s)),
      ` over ${wait.samples} jobs`,
    );
    const started = jobs
      .filter((job) => waitOf(job) !== null)
      .sort((a, b) => Date.parse(a.queued_at) - Date.parse(b.queued_at) || a.id - b.id)
      .slice(-CHART_JOBS);
    const width = 640, height = 220, left = 40, right = 10, top = 12, bottom = 26;
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "wait per job" });
    const plotW = width - left - right, plotH = height - top - bottom;
    const { ceiling, ticks } = niceScale(Math.max(1, ...started.map(waitOf)));
    const y = (value) => top + plotH - (plotH * value) / ceiling;
    for (let i = 0; i <= ticks; i++) {
      const value = (ceiling * i) / ticks;
      chart.append(
        svg("line", { class: "axis", x1: left, x2: width - right, y1: y(value), y2: y(value) }),
        svg("text", { class: "tick", x: left - 6, y: y(value) + 4, "text-anchor": "end" }, tickLabel(value)),
      );
    }
    if (started.length === 0) {
      chart.append(svg("text", { class: "tick", x: left + plotW / 2, y: top + plotH / 2, "text-anchor": "middle" }, "no job has started yet"));
    }
    const slot = plotW / Math.max(started.length, 20);
    started.forEach((job, i) => {
      const value = waitOf(job);
      const bar = svg("rect", {
        x: left + i * slot + slot * 0.15,
        y: y(value),
        width: Math.max(1, slot * 0.7),
        height: Math.max(1, y(0) - y(value)),
        fill: colorOf(job.pool),
        rx: 1.5,
      });
      bar.append(svg("title", {}, `job ${job.id} (${job.pool || "unmatched"}): waited ${seconds(value)}`));
      chart.append(bar);
    });
    if (started.length) {
      chart.append(
        svg("text", { class: "tick", x: left, y: height - 8 }, clock(started[0].queued_at)),
        svg("text", { class: "tick", x: width - right, y: height - 8, "text-anchor": "end" }, clock(started[started.length - 1].queued_at)),
      );
    }
    if (wait.median_s !== null && started.length) {
      const my = y(Math.min(wait.median_s, ceiling));
      chart.append(svg("line", { class: "median", x1: left, x2: width - right, y1: my, y2: my }));
    }
    const pools = [...new Set(started.map((job) => job.pool || "unmatched"))].sort();
    const legend = el(
      "div",
      { class: "legend" },
      ...pools.map((pool) => el("span", {}, el("i", { style: `background:${colorOf(pool)}` }), pool)),
      started.length ? el("span", {}, el("i", { class: "median-key" }), "median") : null,
    );
    $("latency").replaceChildren(chart, legend);
  }

  // -- polling --------------------------------------------------------------------------------------

  class Unauthorized extends Error {}

  async function get(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    if (response.status === 401) throw new Unauthorized(signedIn ? "the token was refused" : "");
    if (response.status === 403) throw new Unauthorized("this token's scope cannot read the API");
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return response.json();
  }

  async function poll() {
    timer = null;
    try {
      const [summary, runners, jobs, scaleSetJobs, failures] = await Promise.all([
        get("api/v1/summary"),
        get("api/v1/runners"),
        get("api/v1/jobs?limit=200"),
        get(`api/v1/scale-set-jobs?limit=${JOB_ROWS}`),
        get("api/v1/failures?limit=15"),
      ]);
      renderOverview(summary);
      renderPools(summary.pools);
      renderRunners(summary.runners, runners);
      renderJobs(jobs);
      renderScaleSetJobs(scaleSetJobs);
      renderLatency(jobs, summary.wait);
      renderFailures(failures);
      renderJobStory(selectedJob === null ? null : await jobStory(selectedJob));
      lastSuccess = Date.now();
      signedIn = true;
      $("login").hidden = true;
      $("board").hidden = false;
      $("forget").hidden = false;
      setConnection("live", "pill-ok");
      document.body.dataset.rendered = "true";
    } catch (error) {
      if (error instanceof Unauthorized) {
        signedIn = false;
        return showLogin(error.message && `${error.message}; give another token.`);
      }
      const stale = Date.now() - lastSuccess > STALE_MS;
      setConnection(stale ? "disconnected, retrying" : "retrying", stale ? "pill-bad" : "pill-wait");
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function init() {
    $("login-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const input = $("token-input");
      const value = input.value.trim();
      input.value = "";
      if (!value) return;
      try {
        await signIn(value);
      } catch (error) {
        return showLogin(error instanceof Unauthorized ? `${error.message}; give another token.` : error.message);
      }
      signedIn = true;
      start();
    });
    // `#job=ID` (or `#scale-set-job=ID`) opens that job's story: a link an operator can hand to whoever asked
    // why their job waits.
    const linked = /^#(job|scale-set-job)=(\d{1,19})$/.exec(window.location.hash);
    if (linked) selectedJob = { kind: linked[1], id: linked[2] };
    $("job-story-close").addEventListener("click", () => {
      window.history.replaceState(null, "", window.location.pathname + window.location.search);
      selectedJob = null;
      renderJobStory(null);
    });
    $("forget").addEventListener("click", async () => {
      signedIn = false;
      await signOut();
      showLogin("Signed out.");
    });
    // A sign-in of this browser may still hold (the cookie): try it; a 401 shows the form.
    poll();
  }

  init();
})();
