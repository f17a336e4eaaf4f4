#!/usr/bin/env python3
"""Run `specdec rec knowledge` sharded over a Ray cluster and merge the shards.

    knowledge.py --input IN --output OUT --shards N [--pools DIR] [--shared-state URL]
                 [--address ADDR] [--specdec PATH] [other `rec knowledge` flags]

One Ray task per shard runs `specdec rec knowledge --shard I/N --resume` into its own file,
OUT.parts/shard-I.jsonl (and its own pools folder, DIR/shard-I), in two phases: every shard's
warm-up records (`--warmup only`), then every shard's targets (`--warmup skip`), so that no
target starts before all warm-up records are done. A task whose worker dies is retried by Ray
(`max_retries`); one whose binary exits non-zero is retried too, except exit 2 (bad input or
flags: a retry would not fix it). `--resume` makes a retry continue where the dead attempt
stopped. At the end the shard files are merged into OUT, in input order, with every input id
exactly once, written atomically. See README.md here.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Set by the tests only: "SHARD:LINES:MARKER" makes the first attempt of SHARD's target phase
# SIGKILL its own Ray worker once the binary has appended LINES lines, and creates MARKER (a
# path the worker can write) so that the retry runs normally. It stands in for a node or
# worker dying mid-run; the driver reads it and hands it to the tasks.
TEST_KILL_ENV = "SPECDEC_RAY_TEST_KILL"

PHASES = (("warm-up", "only"), ("targets", "skip"))
# Flags this driver sets per task: given among the pass-through flags, they would fight it.
RESERVED = {"--shard", "--resume", "--warmup", "--output", "--input", "--pools"}
EXIT_BAD_INPUT = 2  # `rec knowledge`: the shard ran but records/lines failed, or a usage error

# Runs between the Ray worker and the binary: asks the kernel to SIGKILL the binary when the
# worker dies (PR_SET_PDEATHSIG), then execs it. Without it a killed worker leaves its
# binary running, still holding the shard's output lock, and the retry could not open it. A
# fresh interpreter does this because preexec_fn is unsafe in a multithreaded Ray worker.
_PDEATHSIG_SHIM = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: Linux
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(137)  # the worker died before prctl: nobody waits for this attempt
os.execvp(sys.argv[2], sys.argv[2:])
"""


class ShardFailed(Exception):
    """The shard's binary failed in a way a retry would not fix."""


class ShardRetry(ShardFailed):
    """The shard's binary failed or was stopped; Ray retries the task, which resumes."""


def _count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _tail(path, offset, limit=4000):
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return text[-limit:]


def _maybe_test_kill(hook, shard, phase, part, start_lines, child):
    """The test-only kill hook (see TEST_KILL_ENV): SIGKILLs this worker once armed."""
    if hook is None or hook[0] != shard or phase != "targets":
        return
    _, lines, marker = hook
    written = _count_lines(part)
    if written - start_lines < lines:
        return
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return  # a previous attempt was killed already: this one runs to its end
    os.write(fd, json.dumps({"child_pid": child.pid, "lines": written}).encode())
    os.fsync(fd)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def run_shard(shard, phase, argv, part, log, cwd, kill_hook):
    """One Ray task: run one shard's phase to its end; raise so that Ray retries it."""
    start_lines = _count_lines(part)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JOB_COMPLETION_INDEX", "JOB_COMPLETIONS")}  # --shard says it
    started = time.monotonic()
    with open(log, "ab") as logf:
        logf.write(f"== shard {shard} {phase}: attempt in pid {os.getpid()}\n".encode())
        logf.flush()
        offset = logf.tell()
        child = subprocess.Popen(
            [sys.executable, "-c", _PDEATHSIG_SHIM, str(os.getpid()), *argv],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
            cwd=cwd if os.path.isdir(cwd) else None)
        while True:
            try:
                rc = child.wait(timeout=None if kill_hook is None else 0.05)
                break
            except subprocess.TimeoutExpired:
                _maybe_test_kill(kill_hook, shard, phase, part, start_lines, child)
    if rc != 0:
        error = ShardFailed if rc == EXIT_BAD_INPUT else ShardRetry
        raise error(f"shard {shard} ({phase}): `specdec rec knowledge` exited {rc}; "
                    f"its log ({log}) ends with:\n{_tail(log, offset)}")
    return shard, time.monotonic() - started


def input_ids(path):
    """The input's ids in order; fails on a malformed line or a repeated id."""
    ids, seen = [], set()
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rid = json.loads(raw)["id"]
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{n}: not a record with an id ({e})")
            if rid in seen:
                sys.exit(f"{path}:{n}: id {rid!r} appears twice in the input")
            seen.add(rid)
            ids.append(rid)
    return ids


class MergeError(Exception):
    pass


def _some(ids, limit=20):
    ids = sorted(ids)
    more = f" ... ({len(ids) - limit} more)" if len(ids) > limit else ""
    return ", ".join(map(repr, ids[:limit])) + more


def merge(ids, parts, out):
    """Writes the parts' lines to `out` in the order of `ids`, each id exactly once."""
    lines, dups = {}, set()
    for part in parts:
        if not os.path.exists(part):
            continue  # a shard with no records may leave no file; its ids show as missing
        with open(part, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                if not raw.endswith(b"\n"):
                    raise MergeError(f"{part}:{n}: torn last line (its shard did not finish)")
                rid = json.loads(raw)["id"]
                if rid in lines:
                    dups.add(rid)
                lines[rid] = raw
    missing = [i for i in ids if i not in lines]
    unknown = set(lines) - set(ids)
    problems = [f"{what} ids: {_some(found)}" for what, found in
                (("missing", missing), ("duplicate", dups), ("unknown", unknown)) if found]
    if problems:
        raise MergeError("shard outputs do not hold every input id exactly once: "
                         + "; ".join(problems))
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(out) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            for rid in ids:
                f.write(lines[rid])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], allow_abbrev=False,
        epilog="Other flags (--max-tokens, --verify, --model, --concurrency, ...) go to "
               "`specdec rec knowledge` unchanged.")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True,
                   help="the merged output; shard files go to OUTPUT.parts/")
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--pools", help="pools root: shard I uses DIR/shard-I "
                                   "(default: OUTPUT.parts/pools/shard-I)")
    p.add_argument("--shared-state", help="passed to `rec knowledge` (Redis URL)")
    p.add_argument("--threads", type=int, default=2,
                   help="kernel threads per shard, also the CPUs each Ray task reserves")
    p.add_argument("--address", help="an existing Ray cluster (default: start one here)")
    p.add_argument("--max-retries", type=int, default=3,
                   help="retries of a shard's task (worker death or a retryable exit)")
    p.add_argument("--specdec", default=os.environ.get("SPECDEC_BIN") or "specdec",
                   help="the binary (default: $SPECDEC_BIN, else specdec on PATH)")
    args, extra = p.parse_known_args(argv)
    clash = sorted({a.split("=", 1)[0] for a in extra} & RESERVED)
    if clash:
        p.error(f"{', '.join(clash)}: set by this driver per shard")
    if args.shards < 1:
        p.error("--shards must be at least 1")
    return args, extra


def _kill_hook():
    spec = os.environ.get(TEST_KILL_ENV)
    if not spec:
        return None
    shard, lines, marker = spec.split(":", 2)
    return int(shard), int(lines), os.path.abspath(marker)


def _check_shard_count(parts, shards):
    """Refuses to resume shard files written for another N: ids would change shards."""
    manifest = os.path.join(parts, "shards.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            before = json.load(f)["shards"]
        if before != shards:
            sys.exit(f"{parts} holds a run with --shards {before}: finish it with that, "
                     f"or delete the folder to start over with {shards}")
    else:
        with open(manifest, "w") as f:
            json.dump({"shards": shards}, f)


def main(argv=None):
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    binary = shutil.which(args.specdec)
    if binary:
        binary = os.path.abspath(binary)
    elif args.address:
        binary = args.specdec  # the driver's machine may lack it: the workers' PATH decides
    else:
        sys.exit(f"specdec binary not found: {args.specdec} (set --specdec or SPECDEC_BIN)")
    # Tasks may run on other nodes and in other folders: hand them absolute paths (on a
    # cluster these must name a filesystem every node shares).
    inp, out = os.path.abspath(args.input), os.path.abspath(args.output)
    ids = input_ids(inp)
    parts = out + ".parts"
    os.makedirs(parts, exist_ok=True)
    _check_shard_count(parts, args.shards)
    pools = os.path.abspath(args.pools) if args.pools else os.path.join(parts, "pools")

    import ray  # here, so that merge() and the rest import without Ray

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, args.threads),
                 include_dashboard=False)
    task = ray.remote(run_shard).options(
        num_cpus=args.threads, max_retries=args.max_retries, retry_exceptions=[ShardRetry])
    hook = _kill_hook()
    try:
        for phase, warmup in PHASES:
            refs = {}
            for i in range(args.shards):
                # Pools persist between the phases (and across retries) even without
                # --pools: that is how the targets learn from the warm-up records.
                pool = os.path.join(pools, f"shard-{i}")
                os.makedirs(pool, exist_ok=True)
                part = os.path.join(parts, f"shard-{i}.jsonl")
                cmd = [binary, "rec", "knowledge", "--input", inp, "--output", part,
                       "--pools", pool, "--shard", f"{i}/{args.shards}", "--resume",
                       "--warmup", warmup, "--threads", str(args.threads)]
                if args.shared_state:
                    cmd += ["--shared-state", args.shared_state]
                ref = task.remote(i, phase, cmd + extra, part,
                                  os.path.join(parts, f"shard-{i}.log"), os.getcwd(), hook)
                refs[ref] = i
            failed = []
            pending = list(refs)
            while pending:  # wait for every shard, so that all failures are reported
                [ref], pending = ray.wait(pending, num_returns=1)
                try:
                    shard, seconds = ray.get(ref)
                    print(f"{phase}: shard {shard} done in {seconds:.1f} s", file=sys.stderr)
                except Exception as e:  # RayTaskError (our ShardFailed inside) or a crash
                    failed.append(f"shard {refs[ref]}: {getattr(e, 'cause', None) or e}")
            if failed:
                sys.exit(f"{phase} phase failed; once the cause is fixed, the same command "
                         f"resumes ({parts} keeps what is done):\n" + "\n".join(failed))
    finally:
        ray.shutdown()
    try:
        merge(ids, [os.path.join(parts, f"shard-{i}.jsonl") for i in range(args.shards)], out)
    except MergeError as e:
        sys.exit(str(e))
    print(f"{len(ids)} records from {args.shards} shards merged into {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
