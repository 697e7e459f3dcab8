#!/usr/bin/env python3
"""Redis instructions per job of enqueue, claim and ack, in calls of 1,000.

Runs redis-server under `valgrind --tool=callgrind` (instruction counts do
not depend on the machine's load), loads the scripts assembled from LUADIR
as punctual does: the shebang line, includes/keys.lua and the includes the
script names (`-- include: NAME`, each once, after those it names), then
the rest (for a LUADIR of a version with lib.lua: the whole lib.lua, where
punctual kept only the chunks a script uses: a per-call difference, at most
60 instructions per job in calls of 1,000), and
counts the whole server's instructions during each measured call
(`callgrind_control -z` before, `-d` after; a full Lua GC just before).
Every round starts from an empty Redis:

  enqueue_distinct  1,000 generated ids, a due time per job (100..2,000 ms)
  enqueue           1,000 generated ids, all due in 1 h, into pool (a topic
                    no scheduler ticked on: no cold pool)
  enqueue_cold      the same after one tick (scripts with the cold pool only),
                    as the bench's enqueue phase: into the cold pool
  enqueue_shared,   (scripts with enqueue's shared forms only) enqueue and
  enqueue_cold_shared  enqueue_cold in the shared form "=n" ("=*n", no id
                    arguments, with scripts that have it), the form the Rust
                    library sends a batch of alike jobs in (here in calls of
                    1,000; the library's are 250 by default)
  enqueue_distinct_shared  enqueue_distinct in the form "~n" ("~*n"; a due
                    time per job)
  claim_ready       1,000 jobs enqueued due now, claimed (lease 60 s); every
                    attempts entry is checked to be '0%d:%d' of the reply's
                    attempts and token
  ack               those 1,000, acked with the entries "0A:T" (grouped by
                    entry when ack has the grouped form: one group here)
  promote           1,000 jobs enqueued with 1 ms of delay, promoted by one
                    tick 50 ms later (checked: ZCARD ready is 1,000)
  claim_pool        1,000 jobs enqueued with 1 ms of delay, claimed from the
                    pool 50 ms later
  cold_move         (scripts with the cold pool only) 1,000 jobs enqueued due
                    in 2 s with meta cold_after at 1 s and one tick first
                    (the topic's cold_at: so they are placed cold), then
                    cold_after back at its default and one tick, which moves
                    them into pool (checked: ZCARD pool is 1,000)

The floor (crates/punctual-bench/src/phases/floor.rs, its scripts read from
FLOORRS, default the one beside this file) is measured the same way, on
its own keys: floor_enqueue (1,000 ids with records as punctual's, due in
1 h), floor_promote (1,000 due jobs from pool to ready), floor_claim (1,000 due jobs moved to ready by the floor's promote,
then claimed) and floor_ack (those ids).

usage: scripts_per_job.py LUADIR PORT [ROUNDS [FLOORRS]]   (needs valgrind,
redis-server, callgrind_control and redis-py). Prints the median of the
rounds per job, and each step's ratio to the floor's.
"""
import os, sys, time
import redis

import cgredis
from cgredis import FK, K, b36

luadir, port = sys.argv[1], int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
floor_rs = sys.argv[4] if len(sys.argv) > 4 else cgredis.FLOOR_RS
N = 1000
srv = cgredis.Server(port)
r = srv.r
measure = srv.measure


def helpers(text):
    return cgredis.helpers(luadir, text)


sha = {n: r.script_load(cgredis.assemble(luadir, n)) for n in ('enqueue', 'claim', 'ack', 'tick')}
cold = 'cold_place' in helpers(open(f'{luadir}/enqueue.lua').read())
shared = 'the shared form' in open(f'{luadir}/enqueue.lua').read()
starred = '"=*n"' in open(f'{luadir}/enqueue.lua').read()
fsha = srv.floor(floor_rs)
payload = cgredis.PAYLOAD


def enqueue(when):
    args = [str(1 << 30), '0', str(N)]
    for i in range(N):
        args += ['', payload, when or 'd%d' % (100 + i * 7919 % 1901), '', '']
    return r.evalsha(sha['enqueue'], 9, *K, *args)


def enqueue_shared(when):
    """The shared forms (since round 8): "=n", when, max and backoff once;
    with no when given, "~n", max and backoff once, a due time per job.
    Since round 10, as the Rust library sends them when every id is to be
    generated: "=*n" and "~*n", no id arguments, the first id back."""
    star = '*' if starred else ''
    if when:
        args = [str(1 << 30), '0', '=%s%d' % (star, N), when, '', '']
        for i in range(N):
            args += [payload] if starred else ['', payload]
    else:
        args = [str(1 << 30), '0', '~%s%d' % (star, N), '', '']
        for i in range(N):
            args += ([] if starred else ['']) + [payload, 'd%d' % (100 + i * 7919 % 1901)]
    rep = r.evalsha(sha['enqueue'], 9, *K, *args)
    if starred:
        assert rep[0] == -1 and len(rep) == 2, rep[:3]
    else:
        assert rep[0] == N and len(rep) == N + 1, rep[:3]


def claim():
    """The claimed jobs as (id, token, attempt), from any round's reply:
    since round 10 the claim's token (shared by its jobs), the count and two
    entries per job (attempts 1 here); in rounds 8 and 9 a token base B
    there instead (the j-th job's token B + j); before, four entries per job."""
    rep = r.evalsha(sha['claim'], 9, *K, str(N), '60000')
    if len(rep) == 3 + 4 * N + 1:
        body = rep[3:-1]
        return [(body[i], body[i + 1], body[i + 2]) for i in range(0, len(body), 4)]
    assert len(rep) == 5 + 2 * N + 1 and rep[4] == N, len(rep)
    if r.hget(K[8], rep[5 + 2]) == b'01:%d' % rep[3]:
        return [(rep[5 + 2 * j], rep[3], 1) for j in range(N)]
    return [(rep[5 + 2 * j], rep[3] + j + 1, 1) for j in range(N)]


def ack(jobs):
    """The jobs acked with their entries "0A:T": grouped by entry when the
    script has the grouped form (round 10), else in pairs."""
    if 'the grouped form' in open(f'{luadir}/ack.lua').read():
        groups = {}
        for id, token, attempt in jobs:
            groups.setdefault(b'0%d:%d' % (attempt, token), []).append(id)
        args = ['', len(groups)]
        for entry, ids in groups.items():
            args += [entry, len(ids)]
        for ids in groups.values():
            args += ids
    else:
        args = []
        for id, token, attempt in jobs:
            args += [id, b'0%d:%d' % (attempt, token)]
    acked = r.evalsha(sha['ack'], 9, *K, *args)
    assert acked == [N] or acked == [1] * N, acked


def floor_enqueue(delay_ms):
    return srv.floor_enqueue(fsha, N, delay_ms)


def floor_claim():
    rep = r.evalsha(fsha['claim'], 3, FK['ready'], FK['running'], FK['jobs'], str(N), '60000')
    assert len(rep[0]) == N, len(rep[0])
    return rep


res = {k: [] for k in ('enqueue_distinct', 'enqueue', 'claim_ready', 'ack', 'promote', 'claim_pool',
                       'floor_enqueue', 'floor_promote', 'floor_claim', 'floor_ack')
       + (('cold_move', 'enqueue_cold') if cold else ())
       + (('enqueue_shared', 'enqueue_cold_shared', 'enqueue_distinct_shared') if shared else ())}
enqueue('d0')
ack(claim())  # warm-up
for _ in range(rounds):
    r.flushall()
    res['enqueue_distinct'].append(measure(lambda: enqueue(None))[1])
    r.flushall()
    res['enqueue'].append(measure(lambda: enqueue('d3600000'))[1])
    if cold:
        r.flushall()
        r.evalsha(sha['tick'], 9, *K, str(N), '1000000', str(N))
        res['enqueue_cold'].append(measure(lambda: enqueue('d3600000'))[1])
        assert r.zcard(K[0]) == 0
    if shared:
        r.flushall()
        res['enqueue_distinct_shared'].append(measure(lambda: enqueue_shared(None))[1])
        r.flushall()
        res['enqueue_shared'].append(measure(lambda: enqueue_shared('d3600000'))[1])
        r.flushall()
        r.evalsha(sha['tick'], 9, *K, str(N), '1000000', str(N))
        res['enqueue_cold_shared'].append(measure(lambda: enqueue_shared('d3600000'))[1])
        assert r.zcard(K[0]) == 0
    r.flushall()
    enqueue('d0')
    rep, t = measure(claim)
    res['claim_ready'].append(t)
    att = r.hgetall(K[8])
    for id, token, attempt in rep:
        assert att[id] == b'0%d:%d' % (attempt, token), (att[id], token)
    res['ack'].append(measure(lambda: ack(rep))[1])
    r.flushall()
    enqueue('d1')
    time.sleep(0.05)
    rep, t = measure(claim)
    res['claim_pool'].append(t)
    ack(rep)
    r.flushall()
    enqueue('d1')
    time.sleep(0.05)
    _, t = measure(lambda: r.evalsha(sha['tick'], 9, *K, str(N), '1000000', str(N)))
    assert r.zcard(K[1]) == N
    res['promote'].append(t)
    if cold:
        r.flushall()
        r.hset(K[5], 'cold_after', '1000')
        r.evalsha(sha['tick'], 9, *K, str(N), '1000000', str(N))  # the topic's first tick: cold_at
        enqueue('d2000')
        assert r.zcard(K[0]) == 0
        r.hset(K[5], 'cold_after', '600000')
        _, t = measure(lambda: r.evalsha(sha['tick'], 9, *K, str(N), '1000000', str(N)))
        assert r.zcard(K[0]) == N
        res['cold_move'].append(t)
    r.flushall()
    res['floor_enqueue'].append(measure(lambda: floor_enqueue(3600000))[1])
    r.flushall()
    floor_enqueue(1)
    time.sleep(0.05)
    promoted, t = measure(lambda: r.evalsha(fsha['promote'], 2, FK['pool'], FK['ready'], str(N)))
    assert promoted == N
    res['floor_promote'].append(t)
    rep, t = measure(floor_claim)
    res['floor_claim'].append(t)
    acked, t = measure(lambda: r.evalsha(fsha['ack'], 2, FK['running'], FK['jobs'], *rep[0]))
    assert acked == N
    res['floor_ack'].append(t)
srv.shutdown()
med = {k: sorted(v)[len(v) // 2] / N for k, v in res.items()}
for k, v in res.items():
    print(f'{k:17s} {med[k]:8.0f} instructions per job  rounds {[round(x / N) for x in v]}')
for k, f in (('enqueue', 'floor_enqueue'), ('claim_ready', 'floor_claim'), ('ack', 'floor_ack')):
    print(f'{k} / {f}: {med[k] / med[f]:.2f}')
if shared:
    # The scripts phase's full path: enqueue (the shared form, into pool),
    # promote, claim, ack; over the floor's four.
    ours = med['enqueue_shared'] + med['promote'] + med['claim_ready'] + med['ack']
    floor = med['floor_enqueue'] + med['floor_promote'] + med['floor_claim'] + med['floor_ack']
    print(f'full path (enqueue_shared + promote + claim_ready + ack) / floor: {ours / floor:.2f}')
print(f"enqueue + claim_ready + ack / floor's: "
      f"{(med['enqueue'] + med['claim_ready'] + med['ack']) / (med['floor_enqueue'] + med['floor_claim'] + med['floor_ack']):.2f}")
