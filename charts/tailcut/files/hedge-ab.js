// tailcut A/B verification: the hedged route and an unhedged reference, two arms
// in one run against the same replicas.
//   hedged: plain requests through tailcut's Envoy: the traffic real clients
//           send, and the only traffic tailcut's estimator reads.
//   unhedged, by UNHEDGED:
//     bypass: requests carrying x-tailcut-bypass: 1 through the same Envoy, so
//             both arms share every hop; the estimator never reads that route.
//     direct: requests straight to the replicas (DIRECT_URLS, round robin):
//             what clients get without tailcut at all.
// Both arms run an open model (constant-arrival-rate), so a slow server cannot slow
// the offered load down; a run that drops iterations is reported as invalid.
//
// Environment:
//   TARGET_URL      Envoy listener, e.g. http://127.0.0.1:10000        (required)
//   HOST            Host header naming the Service, e.g. workload.demo  (required)
//   UNHEDGED        bypass or direct                                    (default bypass)
//   DIRECT_URLS     comma-separated replica base URLs, for UNHEDGED=direct
//   RATE            requests per second per arm                         (default 150)
//   DURATION        length of the measured run                          (default 60s)
//   SETTLE          both arms at RATE for this long first, not measured: the
//                   delay is derived from the traffic before the run, and a
//                   step to RATE moves it; the verdict reads the steady state
//                   (default 0s). Errors and extra load count in it too.
//   PATH_PREFIX     request path                                        (default /)
//   MAX_P99_RATIO   pass when hedged p99 <= ratio * unhedged p99        (default 0.5)
//   WORKLOAD_METRICS comma-separated /metrics URLs of the replicas, to count the
//                   extra attempts that reached them                    (optional)
//   BUDGET_PCT      the policy's maxExtraLoadPercent: fail when the extra load
//                   counted at the replicas is above it; needs WORKLOAD_METRICS
//                   (optional)
//   POST_RATE       POSTs per second on the hedged host (must never be duplicated) (default 0)
//   SCENARIO        free text copied to the summary                     (optional)
//   SUMMARY_PATH    where handleSummary writes the JSON summary         (default summary.json)
//   HEDGED_P99_MAX_MS optional absolute threshold on the hedged arm's p99
//
// k6 thresholds cannot compare two metrics, so the verdict is computed in
// handleSummary ("verdict" in the JSON) and enforced by the runner (make demo,
// make test-e2e, the kind e2e). It checks every promise at once: the tail ratio,
// the extra load against the budget, errors, dropped iterations and duplicated
// POSTs. The thresholds below make k6 itself exit non-zero on errors, dropped
// iterations and, when HEDGED_P99_MAX_MS is set, a hedged p99 above that bound.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const TARGET = requireEnv('TARGET_URL');
const HOST = requireEnv('HOST');
const RATE = parseInt(__ENV.RATE || '150', 10);
const DURATION = __ENV.DURATION || '60s';
const SETTLE = __ENV.SETTLE || '0s';
const SETTLING = !/^0+[a-z]*$/.test(SETTLE);
const PATH = __ENV.PATH_PREFIX || '/';
const MAX_RATIO = parseFloat(__ENV.MAX_P99_RATIO || '0.5');
const UNHEDGED = __ENV.UNHEDGED || 'bypass';
if (UNHEDGED !== 'bypass' && UNHEDGED !== 'direct') throw new Error(`UNHEDGED must be bypass or direct, not ${UNHEDGED}`);
const DIRECT = (__ENV.DIRECT_URLS || '').split(',').filter((u) => u);
if (UNHEDGED === 'direct' && DIRECT.length === 0) throw new Error('UNHEDGED=direct needs DIRECT_URLS');
const BUDGET = __ENV.BUDGET_PCT ? parseFloat(__ENV.BUDGET_PCT) : null;
const POST_RATE = parseInt(__ENV.POST_RATE || '0', 10);
const METRICS = (__ENV.WORKLOAD_METRICS || '').split(',').filter((u) => u);
// Enough VUs that the arrival rate never waits for a free VU: rate x worst latency.
const VUS = Math.max(20, Math.ceil(RATE * 0.5));

// Percentiles reported per arm; the report's percentile plot uses all of them.
const PERCENTILES = [10, 25, 50, 75, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95];

const backendRequests = new Counter('backend_requests');
const backendExtraAttempts = new Counter('backend_extra_attempts');
const backendSideEffects = new Counter('backend_side_effects');
const postsSent = new Counter('posts_sent');

function requireEnv(name) {
  const v = __ENV[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
}

// A measured arm starts after the settling phase; its settling twin is tagged
// settle-<arm> and runs before it.
function arm(name, exec, rate, settling = false) {
  return {
    executor: 'constant-arrival-rate', exec, rate, timeUnit: '1s',
    duration: settling ? SETTLE : DURATION, startTime: settling ? '0s' : SETTLE,
    preAllocatedVUs: VUS, maxVUs: VUS * 4, tags: { arm: settling ? `settle-${name}` : name },
  };
}

const scenarios = { [UNHEDGED]: arm(UNHEDGED, UNHEDGED, RATE), hedged: arm('hedged', 'hedged', RATE) };
if (POST_RATE > 0) scenarios.posts = arm('posts', 'post', POST_RATE);
const ARMS = Object.values(scenarios).map((sc) => sc.tags.arm);
if (SETTLING) {
  for (const [key, sc] of Object.entries(scenarios)) {
    scenarios[`settle_${key}`] = arm(sc.tags.arm, sc.exec, sc.rate, true);
  }
}
const SETTLE_ARMS = SETTLING ? ARMS.map((a) => `settle-${a}`) : [];

export const options = {
  scenarios,
  summaryTrendStats: ['count', 'avg', 'min', 'max'].concat(PERCENTILES.map((p) => `p(${p})`)),
  // Thresholds on the arm sub-metrics also make k6 report them in the summary.
  // A median above 5s means requests are timing out, not being measured.
  thresholds: {
    [`http_req_duration{arm:${UNHEDGED}}`]: ['p(50)<5000'],
    'http_req_duration{arm:hedged}': ['p(50)<5000'].concat(
      __ENV.HEDGED_P99_MAX_MS ? [`p(99)<${parseFloat(__ENV.HEDGED_P99_MAX_MS)}`] : []),
    [`http_req_failed{arm:${UNHEDGED}}`]: ['rate==0'],
    'http_req_failed{arm:hedged}': ['rate==0'],
    [`http_reqs{arm:${UNHEDGED}}`]: ['count>0'],
    'http_reqs{arm:hedged}': ['count>0'],
    dropped_iterations: ['count==0'],
    ...Object.fromEntries(SETTLE_ARMS.map((a) => [`http_req_failed{arm:${a}}`, ['rate==0']])),
  },
  discardResponseBodies: true,
  noConnectionReuse: false,
};

export function bypass() {
  const r = http.get(TARGET + PATH, { headers: { Host: HOST, 'x-tailcut-bypass': '1' } });
  check(r, { 'bypass 200': (x) => x.status === 200 });
}

let next = 0;
export function direct() {
  const url = DIRECT[next++ % DIRECT.length];
  const r = http.get(url + PATH);
  check(r, { 'direct 200': (x) => x.status === 200 });
}

export function hedged() {
  const r = http.get(TARGET + PATH, { headers: { Host: HOST } });
  check(r, { 'hedged 200': (x) => x.status === 200 });
}

export function post() {
  const r = http.post(TARGET + PATH, '{}', { headers: { Host: HOST, 'Content-Type': 'application/json' } });
  postsSent.add(1);
  check(r, { 'post 200': (x) => x.status === 200 });
}

// Reads the replicas' counters: requests, extra attempts (x-envoy-attempt-count > 1)
// and side effects (non-idempotent requests).
function backendCounters() {
  const c = { requests: 0, extra: 0, sideEffects: 0 };
  for (const url of METRICS) {
    const r = http.get(url, { tags: { arm: 'metrics' }, responseType: 'text' });
    if (r.status !== 200) throw new Error(`GET ${url}: ${r.status}`);
    for (const line of r.body.split('\n')) {
      if (line.startsWith('#')) continue;
      const m = line.match(/^(\w+)(\{[^}]*\})?\s+([0-9.eE+-]+)/);
      if (!m) continue;
      const v = parseFloat(m[3]);
      if (m[1] === 'workload_requests_total') c.requests += v;
      if (m[1] === 'workload_side_effects_total') c.sideEffects += v;
      if (m[1] === 'workload_envoy_attempts_total' && !/attempt="1"/.test(m[2] || '')) c.extra += v;
    }
  }
  return c;
}

export function setup() {
  return backendCounters();
}

export function teardown(before) {
  const after = backendCounters();
  backendRequests.add(after.requests - before.requests);
  backendExtraAttempts.add(after.extra - before.extra);
  backendSideEffects.add(after.sideEffects - before.sideEffects);
}

function trend(data, armName) {
  const m = data.metrics[`http_req_duration{arm:${armName}}`];
  const failed = data.metrics[`http_req_failed{arm:${armName}}`];
  const v = (m && m.values) || {};
  return {
    count: v.count || 0,
    p50_ms: v['p(50)'], p90_ms: v['p(90)'], p95_ms: v['p(95)'], p99_ms: v['p(99)'], p999_ms: v['p(99.9)'],
    max_ms: v.max,
    error_rate: failed ? failed.values.rate : 0,
    percentiles_ms: Object.fromEntries(PERCENTILES.map((p) => [String(p), v[`p(${p})`]])),
  };
}

// settling is what the settling phase sent: requests per arm and the error
// rate over all of them.
function settling(data) {
  const out = { duration: SETTLE, requests: {}, error_rate: 0 };
  let failed = 0;
  let total = 0;
  for (const a of SETTLE_ARMS) {
    const m = data.metrics[`http_req_failed{arm:${a}}`];
    const n = m ? m.values.passes + m.values.fails : 0;
    out.requests[a.replace(/^settle-/, '')] = n;
    failed += m ? m.values.passes : 0;
    total += n;
  }
  out.error_rate = total ? failed / total : 0;
  return out;
}

function counter(data, name) {
  const m = data.metrics[name];
  return m ? m.values.count : 0;
}

export function handleSummary(data) {
  const unhedgedArm = trend(data, UNHEDGED);
  const hedgedArm = trend(data, 'hedged');
  const ratio = (k) => (unhedgedArm[k] > 0 ? hedgedArm[k] / unhedgedArm[k] : null);
  const extra = counter(data, 'backend_extra_attempts');
  const dropped = counter(data, 'dropped_iterations');
  const posts = counter(data, 'posts_sent');
  const sideEffects = counter(data, 'backend_side_effects');
  const settle = settling(data);
  // The replicas' counters span the whole run, settling included.
  const hedgedSent = hedgedArm.count + (settle.requests.hedged || 0);
  const summary = {
    arms: { [UNHEDGED]: unhedgedArm, hedged: hedgedArm },
    unhedged_arm: UNHEDGED,
    ratio: { p50: ratio('p50_ms'), p90: ratio('p90_ms'), p95: ratio('p95_ms'), p99: ratio('p99_ms'), p999: ratio('p999_ms') },
    extra_load_pct: METRICS.length && hedgedSent ? (100 * extra) / hedgedSent : null,
    budget_pct: BUDGET,
    backend_requests: counter(data, 'backend_requests'),
    backend_extra_attempts: extra,
    posts_sent: posts,
    post_side_effects: METRICS.length ? sideEffects : null,
    dropped_iterations: dropped,
    rate_per_arm: RATE,
    duration: DURATION,
    settle: SETTLING ? settle : null,
    scenario: __ENV.SCENARIO || '',
    max_p99_ratio: MAX_RATIO,
  };
  const reasons = [];
  if (dropped > 0) reasons.push(`invalid run: ${dropped} dropped iterations (open model could not keep the rate)`);
  if (unhedgedArm.error_rate > 0 || hedgedArm.error_rate > 0) reasons.push('requests failed');
  if (settle.error_rate > 0) reasons.push(`requests failed while settling (${fmt(100 * settle.error_rate, 2)}%)`);
  if (summary.ratio.p99 === null || summary.ratio.p99 > MAX_RATIO) {
    reasons.push(`hedged p99 ${fmt(hedgedArm.p99_ms)} ms is not <= ${MAX_RATIO} x ${UNHEDGED} p99 ${fmt(unhedgedArm.p99_ms)} ms`);
  }
  if (BUDGET !== null) {
    if (summary.extra_load_pct === null) reasons.push('extra load not measured (BUDGET_PCT needs WORKLOAD_METRICS)');
    else if (summary.extra_load_pct > BUDGET) {
      reasons.push(`extra load ${fmt(summary.extra_load_pct, 2)}% is above the ${BUDGET}% budget`);
    }
  }
  if (METRICS.length && posts > 0 && sideEffects > posts) reasons.push(`${sideEffects - posts} POSTs were duplicated`);
  summary.verdict = { pass: reasons.length === 0, reasons };
  const json = JSON.stringify(summary, null, 2);
  return {
    [__ENV.SUMMARY_PATH || 'summary.json']: json,
    stdout: table(summary) + '\nTAILCUT_SUMMARY_JSON ' + JSON.stringify(summary) + '\n',
  };
}

function fmt(v, digits = 1) {
  return v === null || v === undefined ? '-' : v.toFixed(digits);
}

function table(s) {
  const rows = [['', 'count', 'p50', 'p90', 'p95', 'p99', 'p99.9', 'max']];
  for (const name of [s.unhedged_arm, 'hedged']) {
    const a = s.arms[name];
    rows.push([name, String(a.count), fmt(a.p50_ms), fmt(a.p90_ms), fmt(a.p95_ms), fmt(a.p99_ms), fmt(a.p999_ms), fmt(a.max_ms)]);
  }
  const r = s.ratio;
  rows.push(['ratio', '', fmt(r.p50, 2), fmt(r.p90, 2), fmt(r.p95, 2), fmt(r.p99, 2), fmt(r.p999, 2), '']);
  const out = rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(8) : c.padStart(8))).join('')).join('\n');
  const verdict = s.verdict.pass ? 'PASS' : 'FAIL: ' + s.verdict.reasons.join('; ');
  const budget = s.budget_pct === null ? '' : ` (budget ${s.budget_pct}%)`;
  const after = s.settle ? ` after ${s.settle.duration} at the same rate` : '';
  return `\nlatency (ms), ${s.rate_per_arm} rps per arm for ${s.duration}${after}\n${out}\nextra load at the backends: ${
    s.extra_load_pct === null ? 'not measured' : s.extra_load_pct.toFixed(2) + '%'}${budget}\n${verdict}\n`;
}
