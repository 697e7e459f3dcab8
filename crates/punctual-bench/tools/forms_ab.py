#!/usr/bin/env python3
"""Does each special form of the scripts pay? Redis instructions per job
(callgrind, load-independent), each form A/B against the general path it
stands in for, in one run on one redis-server.

Issue 30's rule: a form is kept only where it moves its phase's figure by
5 % or more. Every round starts from an empty Redis; calls of 1,000 jobs
(the single-call rows: 200 calls of one job, per call):

  enqueue forms (one script, the forms it accepts, the jobs generated ids):
    pool      1,000 jobs due in 1 h: five-argument form / "=n" / "=*n"
    cold      the same after one tick (into the cold pool)
    distinct  a due time per job (100..2,000 ms): five / "~n" / "~*n"
    single    one job per call, due now: five ("1") / "=*1"
  the retried set: a claim of 1,000 ready jobs with meta retried = 1 (the
    set trusted: no attempts entry read) / with the set not trusted (one
    unrelated attempts entry: claim reads every id's entry, the general path)
  removal by rank: claim from ready, claim from the pool, and tick's
    promotion, with ZREMRANGEBYRANK (the scripts as they are) / with ZREM of
    the ids (a copy of the scripts with the three calls replaced)

Prints the medians per job and each form's gain over its general path, the
drain's path (claim from ready + ack) with and without the retried set and
removal by rank, and the full path (enqueue "=*n" + promote + claim + ack)
over the floor's with and without each form.

usage: forms_ab.py LUADIR PORT [ROUNDS]   (needs valgrind, redis-server,
callgrind_control and redis-py)
"""
import sys, time

import cgredis
from cgredis import FK, K

luadir, port = sys.argv[1], int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
N = 1000
SINGLE = 200


def assemble(name, edit=None):
    text = cgredis.assemble(luadir, name)
    return edit(text) if edit else text


def by_zrem(name):
    """The script with removal by rank replaced by ZREM of the ids read."""
    def edit(text):
        subs = {
            'claim': [("if not by_rank then\n  variadic('ZREM', K_READY, rids)",
                       "if true then\n  variadic('ZREM', K_READY, rids)"),
                      ("redis.call('ZREMRANGEBYRANK', K_POOL, 0, #pids - 1)",
                       "variadic('ZREM', K_POOL, pids)")],
            'tick': [("redis.call('ZREMRANGEBYRANK', K_POOL, 0, #ids - 1)",
                      "variadic('ZREM', K_POOL, ids)")],
        }[name]
        for a, b in subs:
            assert text.count(a) == 1, (name, a)
            text = text.replace(a, b)
        return text
    return edit


srv = cgredis.Server(port)
r = srv.r
measure = srv.measure
sha = {n: r.script_load(assemble(n)) for n in ('enqueue', 'claim', 'ack', 'tick')}
zsha = {n: r.script_load(assemble(n, by_zrem(n))) for n in ('claim', 'tick')}
fsha = srv.floor()
payload = cgredis.PAYLOAD


def distinct(i):
    return 'd%d' % (100 + i * 7919 % 1901)


def enqueue(form, when, n=N):
    """n jobs with generated ids, in `form`: 'five', '=', '=*', '~', '~*'
    (when None: a due time per job)."""
    args = [str(1 << 30), '0']
    if form == 'five':
        args.append(str(n))
        for i in range(n):
            args += ['', payload, when or distinct(i), '', '']
    elif form[0] == '=':
        args += ['%s%d' % (form, n), when, '', '']
        for i in range(n):
            args += ([] if form == '=*' else ['']) + [payload]
    else:
        args += ['%s%d' % (form, n), '', '']
        for i in range(n):
            args += ([] if form == '~*' else ['']) + [payload, distinct(i)]
    rep = r.evalsha(sha['enqueue'], 9, *K, *args)
    if form == 'five':
        assert len(rep) == 2 * n and all(s == 1 for s in rep[1::2]), rep[:4]
    elif form.endswith('*'):
        assert rep[0] == -1 and len(rep) == 2, rep[:3]
    else:
        assert rep[0] == n and len(rep) == n + 1, rep[:3]


def singles(form):
    for _ in range(SINGLE):
        enqueue(form, 'd0', 1)


def claim(s=None):
    rep = r.evalsha(s or sha['claim'], 9, *K, str(N), '60000')
    assert len(rep) == 5 + 2 * N + 1 and rep[4] == N, len(rep)
    return [(rep[5 + 2 * j], rep[3]) for j in range(N)]


def ack(jobs):
    args = ['', 1, b'01:%d' % jobs[0][1], len(jobs)] + [j[0] for j in jobs]
    assert r.evalsha(sha['ack'], 9, *K, *args) == [N]


def tick(s=None):
    return r.evalsha(s or sha['tick'], 9, *K, str(N), '1000000', str(N))


res = {}


def put(k, v):
    res.setdefault(k, []).append(v)


enqueue('five', 'd0')
ack(claim())  # warm-up
for _ in range(rounds):
    for form in ('five', '=', '=*'):
        r.flushall()
        put(f'pool {form}', measure(lambda: enqueue(form, 'd3600000'))[1] / N)
        r.flushall()
        tick()
        put(f'cold {form}', measure(lambda: enqueue(form, 'd3600000'))[1] / N)
        assert r.zcard(K[0]) == 0
    for form in ('five', '~', '~*'):
        r.flushall()
        put(f'distinct {form}', measure(lambda: enqueue(form, None))[1] / N)
    for form in ('five', '=*'):
        r.flushall()
        put(f'single {form}', measure(lambda: singles(form))[1] / SINGLE)
    # The retried set: trusted (the attempts hash empty at the first claim)
    # or not (an entry predating the set).
    for trusted in (True, False):
        r.flushall()
        if not trusted:
            r.hset(K[8], 'other', '01:1')
        enqueue('=*', 'd0')
        rep, t = measure(claim)
        put(f'claim_ready retried-set {"on" if trusted else "off"}', t / N)
        assert (r.hget(K[5], 'retried') == b'1') == trusted
        a, t = measure(lambda: ack(rep))
        put(f'ack {"" if trusted else "(untrusted)"}', t / N)
    # Removal by rank, or ZREM.
    for rank in (True, False):
        tag = 'rank' if rank else 'zrem'
        # Claimed from ready (due now), or from the pool (due in 1 ms).
        for where, when in (('ready', 'd0'), ('pool', 'd1')):
            r.flushall()
            enqueue('=*', when)
            time.sleep(0.05)
            rep, t = measure(lambda: claim(None if rank else zsha['claim']))
            put(f'claim_{where} {tag}', t / N)
            ack(rep)
        r.flushall()
        enqueue('=*', 'd1')
        time.sleep(0.05)
        _, t = measure(lambda: tick(None if rank else zsha['tick']))
        assert r.zcard(K[1]) == N and r.zcard(K[0]) == 0
        put(f'promote {tag}', t / N)
    r.flushall()
    put('floor_enqueue', measure(lambda: srv.floor_enqueue(fsha, N, 3600000))[1] / N)
    r.flushall()
    srv.floor_enqueue(fsha, N, 1)
    time.sleep(0.05)
    _, t = measure(lambda: r.evalsha(fsha['promote'], 2, FK['pool'], FK['ready'], str(N)))
    put('floor_promote', t / N)
    frep, t = measure(lambda: r.evalsha(fsha['claim'], 3, FK['ready'], FK['running'], FK['jobs'], str(N), '60000'))
    put('floor_claim', t / N)
    _, t = measure(lambda: r.evalsha(fsha['ack'], 2, FK['running'], FK['jobs'], *frep[0]))
    put('floor_ack', t / N)
srv.shutdown()
med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
for k, v in res.items():
    print(f'{k:34s} {med[k]:8.0f} instructions per job  rounds {[round(x) for x in v]}')


def gain(what, form, general):
    g = 1 - med[form] / med[general]
    print(f'{what:40s} {med[general]:8.0f} -> {med[form]:8.0f}  {100 * g:5.1f} %  {"keep" if g >= 0.05 else "under 5 %"}')


print()
print('form (its figure: instructions per job)  general -> with the form')
gain('"=n" over five, into pool', 'pool =', 'pool five')
gain('"=n" over five, into the cold pool', 'cold =', 'cold five')
gain('"=*n" over "=n", into pool', 'pool =*', 'pool =')
gain('"=*n" over "=n", into the cold pool', 'cold =*', 'cold =')
gain('"~n" over five, a due time each', 'distinct ~', 'distinct five')
gain('"~*n" over "~n", a due time each', 'distinct ~*', 'distinct ~')
gain('"=*1" over five, one job per call', 'single =*', 'single five')
gain('retried set, claim from ready', 'claim_ready retried-set on', 'claim_ready retried-set off')
gain('by rank, claim from ready', 'claim_ready rank', 'claim_ready zrem')
gain('by rank, claim from the pool', 'claim_pool rank', 'claim_pool zrem')
gain('by rank, promote', 'promote rank', 'promote zrem')
floor = med['floor_enqueue'] + med['floor_promote'] + med['floor_claim'] + med['floor_ack']
full = med['pool =*'] + med['promote rank'] + med['claim_ready rank'] + med['ack ']
print()
# The drain's Redis path per job: claim from ready, ack.
for what, on, off in (('the retried set', med["claim_ready retried-set on"] + med["ack "],
                       med["claim_ready retried-set off"] + med["ack (untrusted)"]),
                      ('removal by rank', med["claim_ready rank"] + med["ack "],
                       med["claim_ready zrem"] + med["ack "])):
    print(f'drain (claim_ready + ack) with {what} {on:.0f}, without {off:.0f}: {100 * (1 - on / off):.1f} %')
print(f'full path (pool "=*n" + promote + claim_ready + ack) / floor: {full / floor:.3f} ({full:.0f} / {floor:.0f})')
for what, a, b in (('"=*n" as "=n"', 'pool =*', 'pool ='),
                   ('no retried set', 'claim_ready retried-set on', 'claim_ready retried-set off'),
                   ('no removal by rank (claim)', 'claim_ready rank', 'claim_ready zrem'),
                   ('no removal by rank (promote)', 'promote rank', 'promote zrem')):
    print(f'  {what:30s} {(full - med[a] + med[b]) / floor:.3f}')
