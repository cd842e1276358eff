import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { ConfigError, loadConfig } from '../src/config.ts';

const CWD = '/srv/sluice';

/** The ConfigError thrown for `env`, or a failed assertion when none is thrown. */
function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env, CWD);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err.problems;
  }
  assert.fail(`no ConfigError for ${JSON.stringify(env)}`);
}

describe('loadConfig', () => {
  test('defaults per CONTRACT.md', () => {
    const c = loadConfig({}, CWD);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.port, 8080);
    assert.equal(c.baseUrl, 'http://localhost:8080');
    assert.equal(c.dataDir, path.resolve(CWD, 'data'));
    assert.equal(c.databaseUrl, undefined);
    assert.equal(c.redisUrl, undefined);
    assert.equal(c.secret, undefined);
    assert.deepEqual(c.trustProxy, []);
    assert.equal(c.workers, 1);
    assert.equal(c.smtpUrl, undefined);
    assert.equal(c.stripeSecretKey, undefined);
    assert.equal(c.rateLimitAnonPerHour, 60);
    assert.equal(c.anonMaxBundleBytes, 1073741824);
    assert.equal(c.anonExpiryDays, 3);
    assert.equal(c.logLevel, 'info');
  });

  test('a variable one edit from a setting is warned about, naming it; others are not', () => {
    const c = loadConfig({ DATABSE_URL: 'postgres://x', REDIS_ULR: 'redis://x', PROT: '9090', port: '1', HOME: '/root', PATH: '/bin', TEST_REDIS_URL: 'x', SHLVL: '1' }, CWD);
    assert.deepEqual(c.warnings, [
      'DATABSE_URL is not a setting; did you mean DATABASE_URL? (it is ignored)',
      'REDIS_ULR is not a setting; did you mean REDIS_URL? (it is ignored)',
      'PROT is not a setting; did you mean PORT? (it is ignored)',
      'port is not a setting; did you mean PORT? (it is ignored)',
    ]);
    assert.equal(c.port, 8080);
    assert.deepEqual(loadConfig({}, CWD).warnings, []);
  });

  test('LOG_FORMAT: auto by default, json or text when set', () => {
    assert.equal(loadConfig({}, CWD).logFormat, 'auto');
    assert.equal(loadConfig({ LOG_FORMAT: 'JSON' }, CWD).logFormat, 'json');
    assert.equal(loadConfig({ LOG_FORMAT: 'text' }, CWD).logFormat, 'text');
    assert.match(problemsOf({ LOG_FORMAT: 'pretty' })[0]!, /^LOG_FORMAT: expected one of auto, json, text/);
  });

  test('with STORAGE_URL, an anonymous cap no S3 multipart upload can hold is refused at start', () => {
    const big = String(108 * 1024 ** 3);
    assert.deepEqual(problemsOf({ STORAGE_URL: 's3://bucket', ANON_MAX_BUNDLE_BYTES: big }).filter((p) => p.startsWith('ANON_MAX_BUNDLE_BYTES')).length, 1);
    assert.equal(loadConfig({ ANON_MAX_BUNDLE_BYTES: big }, CWD).anonMaxBundleBytes, 108 * 1024 ** 3, 'on disk there is no such bound');
    assert.equal(loadConfig({ STORAGE_URL: 's3://bucket', ANON_MAX_BUNDLE_BYTES: String(100 * 1024 ** 3) }, CWD).anonMaxBundleBytes, 100 * 1024 ** 3);
  });

  test('BASE_URL defaults to the configured port', () => {
    assert.equal(loadConfig({ PORT: '9090' }, CWD).baseUrl, 'http://localhost:9090');
  });

  test('empty values count as unset', () => {
    const c = loadConfig({ HOST: '', PORT: ' ', LOG_LEVEL: '', DATA_DIR: '' }, CWD);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.port, 8080);
    assert.equal(c.logLevel, 'info');
    assert.equal(c.dataDir, path.resolve(CWD, 'data'));
  });

  test('explicit values are used', () => {
    const c = loadConfig(
      {
        HOST: '127.0.0.1',
        PORT: '0',
        BASE_URL: 'https://files.example.com/',
        DATA_DIR: 'var/sluice',
        DATABASE_URL: 'postgres://u@db:5432/sluice',
        REDIS_URL: 'redis://cache:6379',
        TRUST_PROXY: '10.0.0.0/8, 192.168.1.1',
        WORKERS: '4',
        RATE_LIMIT_ANON_PER_HOUR: '10',
        ANON_MAX_BUNDLE_BYTES: '1048576',
        ANON_EXPIRY_DAYS: '7',
        LOG_LEVEL: 'debug',
      },
      CWD,
    );
    assert.equal(c.host, '127.0.0.1');
    assert.equal(c.port, 0);
    assert.equal(c.baseUrl, 'https://files.example.com');
    assert.equal(c.dataDir, path.resolve(CWD, 'var/sluice'));
    assert.equal(c.databaseUrl, 'postgres://u@db:5432/sluice');
    assert.equal(c.redisUrl, 'redis://cache:6379');
    assert.deepEqual(c.trustProxy, ['10.0.0.0/8', '192.168.1.1']);
    assert.equal(c.workers, 4);
    assert.equal(c.rateLimitAnonPerHour, 10);
    assert.equal(c.anonMaxBundleBytes, 1048576);
    assert.equal(c.anonExpiryDays, 7);
    assert.equal(c.logLevel, 'debug');
  });

  test('WORKERS: one process unless asked for more', () => {
    assert.equal(loadConfig({}, CWD).workers, 1);
    const both = { DATABASE_URL: 'postgres://db/x', REDIS_URL: 'redis://cache' };
    assert.equal(loadConfig(both, CWD).workers, 1);
    assert.equal(loadConfig({ ...both, WORKERS: '3' }, CWD).workers, 3);
  });

  test('WORKERS above 1 without shared state is refused, saying why', () => {
    const cases: Array<Record<string, string>> = [{ WORKERS: '2' }, { WORKERS: '2', DATABASE_URL: 'postgres://db/x' }, { WORKERS: '2', REDIS_URL: 'redis://cache' }];
    for (const env of cases) {
      const problems = problemsOf(env);
      assert.equal(problems.length, 1, JSON.stringify(problems));
      assert.match(problems[0]!, /^WORKERS: .*DATABASE_URL and REDIS_URL/);
    }
  });

  test('an absolute DATA_DIR is kept as is', () => {
    assert.equal(loadConfig({ DATA_DIR: '/var/lib/sluice' }, CWD).dataDir, '/var/lib/sluice');
  });

  test('the result is frozen', () => {
    assert.ok(Object.isFrozen(loadConfig({}, CWD)));
  });

  test('one bad value is reported naming its variable', () => {
    for (const [name, value] of [
      ['PORT', 'abc'],
      ['PORT', '65536'],
      ['PORT', '-1'],
      ['LOG_LEVEL', 'loud'],
      ['WORKERS', '0'],
      ['HOST', 'not a host'],
      ['BASE_URL', 'not a url'],
      ['BASE_URL', 'ftp://example.com'],
      ['DATABASE_URL', 'mysql://db/x'],
      ['REDIS_URL', 'http://cache'],
      ['TRUST_PROXY', '10.0.0.0/99'],
      ['SECRET', 'short'],
      ['RATE_LIMIT_ANON_PER_HOUR', '1.5'],
      ['RATE_LIMIT_CONTENT_PER_MINUTE', '0'],
      ['RATE_LIMIT_CONTENT_PER_MINUTE', 'lots'],
      ['RATE_LIMIT_CONTENT_MISSES_PER_HOUR', '-5'],
      ['ANON_MAX_BUNDLE_BYTES', '1GB'],
      ['ANON_EXPIRY_DAYS', '0'],
      ['BASE_URL', 'https://files.example.com/?q=1'],
      ['BASE_URL', 'https://files.example.com#top'],
      ['STRIPE_PRICE_POWER_WEEKLY', 'price_1'],
      ['STRIPE_PRICE_FOO_MONTHLY', 'price_1'],
      ['STRIPE_PRICE_power_monthly', 'price_1'],
    ] as const) {
      const problems = problemsOf({ [name]: value });
      assert.equal(problems.length, 1, `${name}=${value}: ${JSON.stringify(problems)}`);
      assert.match(problems[0]!, new RegExp(`\\b${name}\\b`), `${name}=${value}`);
    }
  });

  test('content budgets: generous defaults, operator values used', () => {
    const d = loadConfig({}, CWD);
    assert.equal(d.rateLimitContentPerMinute, 1200);
    assert.equal(d.rateLimitContentMissesPerHour, 120);
    const c = loadConfig({ RATE_LIMIT_CONTENT_PER_MINUTE: '30', RATE_LIMIT_CONTENT_MISSES_PER_HOUR: '5' }, CWD);
    assert.equal(c.rateLimitContentPerMinute, 30);
    assert.equal(c.rateLimitContentMissesPerHour, 5);
  });

  test('LOG_LEVEL is read case-insensitively', () => {
    assert.equal(loadConfig({ LOG_LEVEL: 'WARN' }, '/srv').logLevel, 'warn');
  });

  test('several bad values are all reported at once, one problem each', () => {
    const bad = {
      PORT: 'abc',
      LOG_LEVEL: 'loud',
      WORKERS: 'many',
      DATABASE_URL: 'nonsense',
      ANON_EXPIRY_DAYS: 'x',
    };
    const problems = problemsOf({ ...bad, HOST: '127.0.0.1' });
    assert.equal(problems.length, Object.keys(bad).length, JSON.stringify(problems));
    for (const name of Object.keys(bad)) {
      assert.equal(problems.filter((p) => new RegExp(`^${name}\\b`).test(p)).length, 1, `${name} in ${JSON.stringify(problems)}`);
    }
  });

  test('the ConfigError message lists every problem', () => {
    try {
      loadConfig({ PORT: 'abc', LOG_LEVEL: 'loud' }, CWD);
      assert.fail('expected a ConfigError');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /PORT/);
      assert.match(err.message, /LOG_LEVEL/);
    }
  });
});
