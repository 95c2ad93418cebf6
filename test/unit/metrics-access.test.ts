import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { networkInterfaces } from 'node:os';
import { createLogger } from '../../shared/logger.js';
import { isLoopback, metricsScrapeAllowed, startMetricsListener } from '../../shared/metrics-process.js';
import { initMetrics } from '../../shared/metrics.js';
import { rawGet } from '../support/raw-get.js';

/*
 * Who may read a worker's metrics on its METRICS_PORT listener (issue 45): the same rule as the api's /metrics.
 * With METRICS_TOKEN, its bearer from everyone; without, loopback peers only, by the socket's own address (a
 * forwarded one is anyone's to write). And only at the exact path `/metrics`.
 */

const log = createLogger('silent', 'test');

/** An address of this machine that is not loopback; undefined when it has none. */
const external = Object.values(networkInterfaces())
  .flat()
  .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;

describe('who may read the metrics', () => {
  it('loopback is 127.0.0.0/8, ::1 and IPv4 loopback seen by an IPv6 socket; nothing else', () => {
    for (const address of ['127.0.0.1', '127.1.2.3', '::1', '::ffff:127.0.0.1'])
      assert.equal(isLoopback(address), true, address);
    for (const address of [
      undefined,
      '',
      '10.0.0.1',
      '192.0.2.2',
      '::ffff:10.0.0.1',
      'fd00::1',
      '::',
      '0.0.0.0',
      '128.0.0.1',
      '1127.0.0.1',
      '127.0.0.1.example',
    ]) {
      assert.equal(isLoopback(address), false, String(address));
    }
  });

  it('without a token: loopback peers only; with one: its bearer, from anywhere', () => {
    assert.equal(metricsScrapeAllowed(undefined, undefined, '127.0.0.1'), true);
    assert.equal(metricsScrapeAllowed(undefined, undefined, '10.1.2.3'), false);
    assert.equal(metricsScrapeAllowed('Bearer anything', undefined, '10.1.2.3'), false);
    assert.equal(metricsScrapeAllowed(undefined, 'secret', '127.0.0.1'), false);
    assert.equal(metricsScrapeAllowed('Bearer wrong', 'secret', '127.0.0.1'), false);
    assert.equal(metricsScrapeAllowed('Bearer secret', 'secret', '10.1.2.3'), true);
  });
});

describe('a worker’s METRICS_PORT listener', () => {
  initMetrics({ perKey: false });
  const listeners: Array<{ close(): Promise<void> }> = [];
  after(async () => {
    await Promise.all(listeners.map((listener) => listener.close()));
  });

  it('serves only the exact path /metrics', async () => {
    const listener = await startMetricsListener(0, '127.0.0.1', log);
    listeners.push(listener);
    assert.equal((await rawGet('127.0.0.1', listener.port, '/metrics')).status, 200);
    assert.equal((await rawGet('127.0.0.1', listener.port, '/metrics?x=1')).status, 200);
    for (const path of ['/metrics/', '//metrics', '/METRICS', '/%6Detrics', '/x/../metrics', '/metrics/.']) {
      const answer = await rawGet('127.0.0.1', listener.port, path);
      assert.equal(answer.status, 404, path);
      assert.doesNotMatch(answer.body, /switchyard_/, path);
    }
  });

  it(
    'without METRICS_TOKEN: answers loopback, refuses any other peer 403, whatever X-Forwarded-For says',
    { skip: external ? false : 'no address off loopback on this machine' },
    async () => {
      const listener = await startMetricsListener(0, '0.0.0.0', log);
      listeners.push(listener);
      const served = await rawGet('127.0.0.1', listener.port, '/metrics');
      assert.equal(served.status, 200);
      assert.match(served.body, /^# HELP switchyard_/m);
      const forged: Array<Record<string, string>> = [{}, { 'x-forwarded-for': '127.0.0.1' }];
      for (const headers of forged) {
        const refused = await rawGet(external!, listener.port, '/metrics', headers);
        assert.equal(refused.status, 403, JSON.stringify(headers));
        assert.match(refused.body, /set METRICS_TOKEN/);
      }
    },
  );

  it('with METRICS_TOKEN: its bearer from every peer, loopback included', async () => {
    const listener = await startMetricsListener(0, '0.0.0.0', log, 'scrape-token');
    listeners.push(listener);
    for (const host of external ? ['127.0.0.1', external] : ['127.0.0.1']) {
      assert.equal((await rawGet(host, listener.port, '/metrics')).status, 401, host);
      assert.equal(
        (await rawGet(host, listener.port, '/metrics', { authorization: 'Bearer wrong' })).status,
        401,
        host,
      );
      assert.equal(
        (await rawGet(host, listener.port, '/metrics', { authorization: 'Bearer scrape-token' })).status,
        200,
        host,
      );
    }
  });
});
