// tailcut demo warm-up: a low, steady load on both routes (bypass and hedged)
// through tailcut's Envoy. The hedged route's plain requests are what tailcut
// derives the hedge delay from, as it would from any client's; the bypass
// route, which the estimator never reads, gives the dashboards' A/B panels data
// before the A/B run.
//
// Environment: TARGET_URL, HOST (required); RATE per route (default 20),
// DURATION (default 5m).
import http from 'k6/http';

const TARGET = __ENV.TARGET_URL;
const HOST = __ENV.HOST;
const RATE = parseInt(__ENV.RATE || '20', 10);
const DURATION = __ENV.DURATION || '5m';
if (!TARGET || !HOST) throw new Error('TARGET_URL and HOST are required');

function route(exec) {
  return {
    executor: 'constant-arrival-rate', exec, rate: RATE, timeUnit: '1s', duration: DURATION,
    preAllocatedVUs: Math.max(5, Math.ceil(RATE * 0.2)), maxVUs: Math.max(20, RATE * 2),
  };
}

export const options = {
  scenarios: { bypass: route('bypass'), hedged: route('hedged') },
  discardResponseBodies: true,
  summaryTrendStats: ['p(50)', 'p(99)'],
};

export function bypass() {
  http.get(TARGET + '/', { headers: { Host: HOST, 'x-tailcut-bypass': '1' } });
}

export function hedged() {
  http.get(TARGET + '/', { headers: { Host: HOST } });
}
