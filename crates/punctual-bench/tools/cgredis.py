"""What scripts_per_job.py and forms_ab.py share: a redis-server under
valgrind's callgrind, the scripts assembled from a Lua directory as punctual
loads them, the instructions of one measured call, and the floor's scripts
(crates/punctual-bench/src/phases/floor.rs)."""
import atexit, glob, os, re, subprocess, time
import redis

# The nine keys of topic t, prefix p, in script order.
K = [f'p:{{t}}:{k}' for k in 'pool ready running dead jobs meta stats seq attempts'.split()]
# The floor's keys.
FK = {'pool': 'f:{t}:pool', 'ready': 'f:{t}:ready', 'running': 'f:{t}:running', 'jobs': 'f:{t}:jobs'}
PAYLOAD = (b'{"order_id": 1, "action": "close", "pad": "' + b'x' * 56 + b'"}')[:100]
FLOOR_RS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '../src/phases/floor.rs')


def includes(luadir, text, out):
    """Appends to `out` the includes `text` names, each after its own."""
    for name in re.findall(r'^-- include: (\w+)$', text, re.M):
        if name not in out:
            includes(luadir, open(f'{luadir}/includes/{name}.lua').read(), out)
            out.append(name)
    return out


def helpers(luadir, text):
    """includes/keys.lua and the includes `text` names (for a LUADIR of a
    version with lib.lua: the whole lib.lua)."""
    if os.path.exists(f'{luadir}/lib.lua'):
        return open(f'{luadir}/lib.lua').read()
    names = includes(luadir, text, ['keys'])
    return ''.join(open(f'{luadir}/includes/{n}.lua').read() for n in names)


def assemble(luadir, name):
    """Script `name` as punctual loads it: the shebang line, the helpers,
    then the rest."""
    shebang, rest = open(f'{luadir}/{name}.lua').read().split('\n', 1)
    return f'{shebang}\n{helpers(luadir, rest)}\n{rest}'


def b36(n):
    d = '0123456789abcdefghijklmnopqrstuvwxyz'
    s = ''
    while n > 0:
        n, x = divmod(n, 36)
        s = d[x] + s
    return s or '0'


class Server:
    """A redis-server on `port` under callgrind, `r` a client of it."""

    def __init__(self, port):
        self.out = f'/tmp/punctual-cg.{port}'
        for f in glob.glob(self.out + '*'):
            os.remove(f)
        self.vp = subprocess.Popen(['valgrind', '--tool=callgrind', f'--callgrind-out-file={self.out}',
                                    'redis-server', '--port', str(port), '--save', '', '--appendonly', 'no',
                                    '--hz', '1'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(lambda: self.vp.poll() is None and self.vp.terminate())
        self.r = redis.Redis(port=port)
        for _ in range(300):
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.2)

    def measure(self, fn):
        """fn()'s result and the whole server's instructions while it ran
        (`callgrind_control -z` before, `-d` after; a full Lua GC first)."""
        self.r.eval("collectgarbage('collect') return 1", 0)
        subprocess.run(['callgrind_control', '-z', str(self.vp.pid)], capture_output=True, check=True)
        res = fn()
        subprocess.run(['callgrind_control', '-d', str(self.vp.pid)], capture_output=True, check=True)
        dump = sorted(glob.glob(self.out + '.*'), key=os.path.getmtime)[-1]
        total = next(int(line.split()[1]) for line in open(dump) if line.startswith(('summary:', 'totals:')))
        os.remove(dump)
        return res, total

    def floor(self, floor_rs=FLOOR_RS):
        """The floor's four scripts loaded: their SHAs by step."""
        src = open(floor_rs).read()

        def const(name):
            return re.search(r'const ' + name + r': &str = r#"(.*?)"#;', src, re.S).group(1)

        return {n: self.r.script_load(const('CHUNKED') + const(n.upper()))
                for n in ('enqueue', 'promote', 'claim', 'ack')}

    def floor_enqueue(self, fsha, n, delay_ms, payload=PAYLOAD):
        """n jobs into the floor's pool, records as punctual's, due in delay_ms."""
        now = int(time.time() * 1000)
        args = []
        for i in range(n):
            args += ['f%011d' % i, str(now + delay_ms),
                     b':%s:%s::0:' % (b36(now + delay_ms).encode(), b36(delay_ms).encode()) + payload]
        return self.r.evalsha(fsha['enqueue'], 2, FK['pool'], FK['jobs'], *args)

    def shutdown(self):
        self.r.shutdown(nosave=True)
        self.vp.wait()
