import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayMetrics, otherAccount, TopAccounts } from '../../shared/metrics.js';

/** A tracker on a clock the test moves, noting the accounts it drops. */
function tracker(size: number) {
  let now = 0;
  const dropped: string[] = [];
  const top = new TopAccounts(
    size,
    (account) => dropped.push(account),
    () => now,
  );
  return { top, dropped, advance: (ms: number) => (now += ms) };
}

const jobs = (top: TopAccounts, account: string, count: number) => {
  let label = '';
  for (let i = 0; i < count; i++) label = top.label(account);
  return label;
};

describe('TopAccounts: the accounts the queue wait names', () => {
  it('names the first accounts while there is room, then counts the rest as other', () => {
    const { top, dropped } = tracker(3);
    assert.deepEqual(
      ['a', 'b', 'c', 'd', 'e'].map((account) => top.label(account)),
      ['a', 'b', 'c', otherAccount, otherAccount],
    );
    assert.equal(top.label('a'), 'a');
    assert.deepEqual([...top.named()], ['a', 'b', 'c']);
    assert.deepEqual(dropped, []);
  });

  it('gives a busier account its place at the next refresh (not before a second), and reports the one dropped', () => {
    const { top, dropped, advance } = tracker(2);
    jobs(top, 'a', 3);
    jobs(top, 'b', 1);
    // c is far busier, but the top is worked out again at most once a second.
    assert.equal(jobs(top, 'c', 10), otherAccount);
    advance(500);
    assert.equal(top.label('c'), otherAccount);
    advance(600);
    assert.equal(top.label('c'), 'c');
    assert.deepEqual(dropped, ['b']);
    assert.equal(top.label('b'), otherAccount);
    assert.equal(top.label('a'), 'a');
    assert.deepEqual(new Set(top.named()), new Set(['a', 'c']));
  });

  it('keeps a holder against a challenger only a little busier (no series flapping), not against one twice as busy', () => {
    const { top, dropped, advance } = tracker(1);
    jobs(top, 'a', 4);
    jobs(top, 'b', 6);
    advance(1000);
    assert.equal(top.label('a'), 'a');
    assert.deepEqual(dropped, []);
    jobs(top, 'b', 10);
    advance(1000);
    assert.equal(top.label('b'), 'b');
    assert.deepEqual(dropped, ['a']);
  });

  it('forgets what was busy long ago: counts halve every minute', () => {
    const { top, dropped, advance } = tracker(1);
    jobs(top, 'old', 100);
    advance(10 * 60_000);
    // 100 jobs ten minutes ago weigh under 0.1 now; twice that is less than 20 fresh jobs.
    jobs(top, 'new', 20);
    advance(1000);
    assert.equal(top.label('new'), 'new');
    assert.deepEqual(dropped, ['old']);
  });

  it('stays bounded under a flood of accounts sending one job each, the busiest kept named', () => {
    const { top, dropped, advance } = tracker(5);
    const busy = ['b1', 'b2', 'b3'];
    for (let i = 0; i < 20_000; i++) {
      top.label(`once-${i}`);
      if (i % 10 === 0) for (const account of busy) top.label(account);
      if (i % 1000 === 0) advance(250);
      assert.ok(top.tracked <= top.capacity, `${top.tracked} accounts counted`);
    }
    assert.ok(top.named().size <= 5);
    for (const account of busy) assert.ok(top.named().has(account), `${account} named`);
    for (const account of busy) assert.equal(top.label(account), account);
    assert.ok(
      dropped.every((account) => account.startsWith('once-')),
      dropped.join(),
    );
    assert.equal(top.label('once-new'), otherAccount);
    // A minute on, one-off accounts that held a place since the start weigh under half a fresh one: they go.
    advance(60_000);
    jobs(top, 'fresh', 3);
    advance(1000);
    top.label('fresh');
    assert.ok(top.named().has('fresh'));
    for (const account of busy) assert.ok(top.named().has(account), `${account} still named`);
    assert.ok(dropped.length >= 1, 'a one-off holder dropped');
  });
});

describe('the per-account queue metrics (METRICS_PER_ACCOUNT=on, METRICS_TOP_ACCOUNTS=2)', () => {
  const samples = async (metrics: GatewayMetrics, name: string) => {
    const text = await metrics.registry.metrics();
    return text.split('\n').filter((line) => line.startsWith(`${name}{`));
  };

  it('the backlog names the accounts with the most waiting jobs over the whole metric, the rest added up as other', async () => {
    const metrics = new GatewayMetrics({ perKey: false, perAccount: true, topAccounts: 2 });
    let rows: Array<[string, string, string, number]> = [
      ['chat', 'default', 'acct_a', 5],
      ['chat', 'flex', 'acct_a', 4],
      ['chat', 'default', 'acct_b', 3],
      ['embeddings', 'default', 'acct_c', 8],
      ['chat', 'default', 'acct_d', 1],
      ['chat', 'default', 'acct_e', 2],
    ];
    metrics.backlogs = () => rows;
    assert.deepEqual((await samples(metrics, 'switchyard_queue_backlog')).sort(), [
      'switchyard_queue_backlog{queue="chat",tier="default",account="acct_a"} 5',
      'switchyard_queue_backlog{queue="chat",tier="default",account="other"} 6',
      'switchyard_queue_backlog{queue="chat",tier="flex",account="acct_a"} 4',
      'switchyard_queue_backlog{queue="embeddings",tier="default",account="acct_c"} 8',
    ]);
    // The next refresh: a drained account leaves, the busiest now are named.
    rows = [
      ['chat', 'default', 'acct_b', 3],
      ['chat', 'default', 'acct_d', 1],
      ['chat', 'default', 'acct_e', 2],
    ];
    assert.deepEqual((await samples(metrics, 'switchyard_queue_backlog')).sort(), [
      'switchyard_queue_backlog{queue="chat",tier="default",account="acct_b"} 3',
      'switchyard_queue_backlog{queue="chat",tier="default",account="acct_e"} 2',
      'switchyard_queue_backlog{queue="chat",tier="default",account="other"} 1',
    ]);
  });

  it('the queue wait removes the series of an account that loses its place', async () => {
    const metrics = new GatewayMetrics({ perKey: false, perAccount: true, topAccounts: 2 });
    const observe = (queue: string, account: string) =>
      metrics.queueWait.get(queue, 'default', metrics.waitAccounts.label(account)).observe(0.01);
    observe('chat', 'acct_a');
    observe('embeddings', 'acct_b');
    observe('chat', 'acct_b');
    for (let i = 0; i < 10; i++) observe('chat', 'acct_c');
    const counts = async () => (await samples(metrics, 'switchyard_queue_wait_seconds_count')).sort();
    assert.deepEqual(await counts(), [
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="acct_a"} 1',
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="acct_b"} 1',
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="other"} 10',
      'switchyard_queue_wait_seconds_count{queue="embeddings",tier="default",account="acct_b"} 1',
    ]);
    // acct_c is the busiest: at the next refresh it takes a place; a (1 job) loses its own, and its series go.
    metrics.waitAccounts.refresh();
    observe('chat', 'acct_c');
    assert.deepEqual(await counts(), [
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="acct_b"} 1',
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="acct_c"} 1',
      'switchyard_queue_wait_seconds_count{queue="chat",tier="default",account="other"} 10',
      'switchyard_queue_wait_seconds_count{queue="embeddings",tier="default",account="acct_b"} 1',
    ]);
  });
});
