"""C36's other processes: a job (store a prompt, or look one up) run in a process with a chosen PYTHONHASHSEED.

A job runs in a fresh interpreter (`fresh_interpreter`), or in a child forked from a hash-seed server
(`forked`): an interpreter started with that PYTHONHASHSEED that imported the suite (torch with it, most of an
interpreter's start) and forks one child per job, so the connectors of one pytest process share one start per
seed. A forked child is a process of its own with that seed in which the connector is imported, built and its
store read for the first time; the server never builds a connector. Both kinds answer as a `subprocess.Popen`
does (`communicate`, `kill`, `poll`, `returncode`), the job's JSON answer the last line of its output.

A fork inherits its server's memory layout, so two children of one server may give equal `id()`s to the same
objects: only a comparison with the storing process itself (C36's first lookup) may run in a forked child; two
processes that must differ from each other except in their seed (C36's store and lookup with the same seed)
are fresh interpreters.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading

from harness.process_exit import leave_without_teardown

# The job comes on stdin once the parent sends it: the interpreter may start (and import the suite) while the
# storing process still runs; the connector is built, and its store read, only after.
_FRESH_SCRIPT = """
import json, sys
import suites.connector.context
from suites.connector.processes import run_job
print(json.dumps(run_job(json.loads(sys.stdin.readline()))))
"""

_SERVER_SCRIPT = """
from suites.connector.processes import serve
serve()
"""


def job(ctx, preset: str, extra: dict, mode: str, prompt_seed: int) -> list:
    """The job for another process: store prompt(`prompt_seed`) on `ctx`'s connector and store (`mode`
    "store"), or look it up and read the `kvconform_object_keys` backdoor where allowed ("lookup")."""
    target = ctx.target
    return [target.name, target.spec, target.source, target.builtin, target.extra_config, target.declared,
            extra, preset, ctx.store_name, mode, prompt_seed, ctx.backdoors, ctx.kv_engine]


def run_job(args: list) -> dict:
    """Run a `job` in this process: {"hit": 0} after a store, {"hit": n, "keys": [...] or None} after a lookup."""
    from harness.targets.connector.selection import connector_target
    from harness.targets.connector.target import ConnectorTarget
    from suites.connector.context import CheckContext, prompt

    (name, spec, source, builtin, target_extra, declared, extra, preset, store_name, mode, seed, backdoors,
     kv_engine) = args
    # The target as the parent built it (a `vllm:` target is vLLM's class behind kvconform's adapter), with the
    # run's extra config: loading builds the connector once with it, and a connector may set up its store on that
    # first construction (the LMCache-like one keeps one store per name in its process, disk tier and all).
    target = (connector_target(spec, source) if spec.startswith("vllm:")
              else ConnectorTarget(name, spec, source, builtin=builtin))
    target.extra_config, target.declared = target_extra, declared
    ctx = CheckContext(target, preset, kv_engine=kv_engine)  # the parent check's engine drives this process too
    ctx.store_name = store_name  # the parent check's model name (and built-in store)
    tokens = prompt(seed, 700)
    engine = ctx.engine(extra=extra)  # a lookup's after the store: a store may read its tier once, at start
    if mode == "store":
        ctx.run(engine, tokens)
        return {"hit": 0}
    keys_of = ctx.optional_backdoor(engine.connector, "kvconform_object_keys")
    probe = engine.make_request(prompt(36, 600), cache_salt="s")  # one prompt for the keys in every process
    keys = keys_of(probe) if backdoors and keys_of is not None else None
    return {"hit": ctx.lookup(engine, tokens + [1]), "keys": keys}


def _environment(hash_seed: str) -> dict[str, str]:
    return dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def fresh_interpreter(hash_seed: str) -> subprocess.Popen:
    """Start a fresh interpreter with PYTHONHASHSEED=`hash_seed` that imports the suite, then waits for its job
    (`send`) on stdin."""
    return subprocess.Popen([sys.executable, "-c", _FRESH_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_environment(hash_seed))


def send(proc: subprocess.Popen, args: list) -> subprocess.Popen:
    """Send `proc` (`fresh_interpreter`) its job."""
    try:
        proc.stdin.write(json.dumps(args) + "\n")
        proc.stdin.flush()  # communicate() closes stdin
    except BrokenPipeError:  # it died at start: communicate() returns its error
        pass
    return proc


# ------------------------------------------------------------------------------------------ hash-seed servers
def serve() -> None:
    """A hash-seed server's loop: import the suite, then for each request on stdin ({"job", "out", "err", "path",
    "env"}) fork a child that runs the job with its output in the files `out` and `err`; answer {"pid"} once
    forked and {"status"} (the child's exit status) once it ended. Ends at the end of stdin, without the interpreter's
    teardown: every answer is written, and freeing torch's modules one by one (about half a CPU second) would keep
    the pytest process that closes its servers at exit (`_close_servers`) waiting."""
    import suites.connector.context  # noqa: F401  (what every job imports: torch, the engine, the suite)

    requests = sys.stdin
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()
    leave_without_teardown(0)


def _child(request: dict) -> None:
    """In a forked child: the job with the parent's path and environment, its answer on stdout, then an
    interpreter's exit (non-daemon threads joined, atexit handlers the job registered run)."""
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the server's requests are not the job's
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        import atexit as child_atexit

        child_atexit._clear()  # the server's handlers are not the job's
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:0] = [p for p in request["path"] if p not in sys.path]
        try:
            print(json.dumps(run_job(request["job"])))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # as an interpreter's exit: wait for the job's non-daemon threads
        child_atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


class ForkedJob:
    """A job in a child of a `_Server`, answering as `subprocess.Popen` does."""

    def __init__(self, server: "_Server", args: list):
        self._server = server
        self.returncode: int | None = None
        self._files = [tempfile.NamedTemporaryFile("r", prefix="kvconform-c36-", delete=False) for _ in range(2)]
        self.pid = server.start({"job": args, "out": self._files[0].name, "err": self._files[1].name,
                                 "path": [p for p in sys.path if p], "env": _environment(server.hash_seed)})

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None and self.pid is not None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The child's stdout and stderr once it ended; `subprocess.TimeoutExpired` after `timeout` seconds."""
        if self.returncode is None:
            status = self._server.status(timeout) if self.pid is not None else 1
            if status is None:
                raise subprocess.TimeoutExpired("forked C36 job", timeout)
            self.returncode = status
        texts = []
        for handle in self._files:
            texts.append(handle.read())
            handle.close()
            os.unlink(handle.name)
        self._files = [open(os.devnull) for _ in range(2)]  # a second communicate() reads nothing
        self._server.release()
        return texts[0], texts[1]


class _Server:
    """One hash-seed server (`serve`) and its answers; one job at a time (`busy`)."""

    def __init__(self, hash_seed: str):
        self.hash_seed = hash_seed
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER_SCRIPT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=_environment(hash_seed))
        self.busy = threading.Lock()
        self._answers: list[dict] = []
        self._ready = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._ready:
                self._answers.append(json.loads(line))
                self._ready.notify_all()
        with self._ready:
            self._answers.append({"pid": None, "status": 1})  # the server ended: the job failed
            self._ready.notify_all()

    def _next(self, timeout: float | None) -> dict | None:
        with self._ready:
            if not self._ready.wait_for(lambda: self._answers, timeout):
                return None
            return self._answers.pop(0)

    def start(self, request: dict) -> int | None:
        """Send `request`; the forked child's pid (None if the server died)."""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._next(None).get("pid")

    def status(self, timeout: float | None) -> int | None:
        answer = self._next(timeout)
        return None if answer is None else answer.get("status", 1)

    def release(self) -> None:
        self.busy.release()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def forked(hash_seed: str, args: list) -> subprocess.Popen | ForkedJob:
    """Run `args` (`job`) in a child of this process's hash-seed server for `hash_seed` (started on first use),
    or in a fresh interpreter while that server is busy with another job (a check given up on after its
    time limit may still be waiting for one)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get(hash_seed)
        if server is None or server.proc.poll() is not None:
            server = _SERVERS[hash_seed] = _Server(hash_seed)
        if not server.busy.acquire(blocking=False):
            return send(fresh_interpreter(hash_seed), args)
    try:
        forked_job = ForkedJob(server, args)
    except BaseException:
        server.release()
        raise
    if forked_job.pid is None:  # the server died (at its start: a fresh interpreter reports why)
        forked_job.communicate()
        return send(fresh_interpreter(hash_seed), args)
    return forked_job


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
