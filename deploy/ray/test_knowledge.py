"""Tests of deploy/ray/knowledge.py. From the repository root:

    target/ci-venv/bin/python -m unittest deploy/ray/test_knowledge.py

The Ray tests need Ray (skipped without it, failed instead when SPECDEC_REQUIRE_RAY=1), the
built binary ($SPECDEC_BIN, else target/release/specdec), the default model in its cache and
the CI records target/ci-recs/{items,users}.jsonl. They run the driver as a command, against
an unsharded `specdec rec knowledge` run of the same records; with `--verify strict` every
text is plain decoding's, so sharding, retries and pools must not change a single token.
"""

import importlib.util
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DRIVER = os.path.join(HERE, "knowledge.py")
RECORDS = [os.path.join(ROOT, "target", "ci-recs", f) for f in ("items.jsonl", "users.jsonl")]
BINARY = os.environ.get("SPECDEC_BIN") or os.path.join(ROOT, "target", "release", "specdec")
FLAGS = ["--max-tokens", "24", "--verify", "strict"]  # short texts: the test stays quick


def _load_driver():
    spec = importlib.util.spec_from_file_location("knowledge", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no Ray: main() does that
    return module


knowledge = _load_driver()


def _lines(path):
    with open(path, "rb") as f:
        return [json.loads(raw) for raw in f if raw.strip()]


class MergeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def _part(self, name, rows, tail=b""):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + tail)
        return path

    def test_input_order_each_id_once(self):
        a = self._part("a", [{"id": "3", "text": "c"}, {"id": "1", "text": "a"}])
        b = self._part("b", [{"id": "2", "text": "b"}])
        out = os.path.join(self.dir.name, "out.jsonl")
        knowledge.merge(["1", "2", "3"], [a, b], out)
        self.assertEqual([r["id"] for r in _lines(out)], ["1", "2", "3"])

    def test_missing_duplicate_and_torn_fail(self):
        out = os.path.join(self.dir.name, "out.jsonl")
        a = self._part("a", [{"id": "1"}, {"id": "1"}])
        with self.assertRaisesRegex(knowledge.MergeError, r"missing ids: '2'.*duplicate ids: '1'"):
            knowledge.merge(["1", "2"], [a], out)
        torn = self._part("t", [{"id": "1"}], tail=b'{"id": "2"')
        with self.assertRaisesRegex(knowledge.MergeError, "torn last line"):
            knowledge.merge(["1", "2"], [torn], out)
        self.assertFalse(os.path.exists(out))


def _alive(pid):
    """Whether pid runs (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class RayDriverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require = os.environ.get("SPECDEC_REQUIRE_RAY") == "1"
        missing = [why for why, ok in (
            ("ray is not importable", importlib.util.find_spec("ray") is not None),
            (f"no binary at {BINARY} (build it or set SPECDEC_BIN)", os.path.exists(BINARY)),
            (f"no records at {RECORDS}", all(map(os.path.exists, RECORDS))),
        ) if not ok]
        if missing:
            message = "; ".join(missing)
            if require:
                raise AssertionError(f"SPECDEC_REQUIRE_RAY=1 but {message}")
            raise unittest.SkipTest(message)
        cls.dir = tempfile.TemporaryDirectory()
        cls.records = os.path.join(cls.dir.name, "records.jsonl")
        with open(cls.records, "wb") as out:
            for path in RECORDS:
                with open(path, "rb") as f:
                    out.write(f.read())
        cls.ids = [r["id"] for r in _lines(cls.records)]
        ref = os.path.join(cls.dir.name, "unsharded.jsonl")
        subprocess.run([BINARY, "rec", "knowledge", "--input", cls.records, "--output", ref,
                        *FLAGS], check=True, capture_output=True, timeout=300)
        cls.expected = cls._rows(ref)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    @staticmethod
    def _rows(path):
        """id -> what must not change: the text and its tokens."""
        return {r["id"]: (r["text"], r["token_ids"]) for r in _lines(path)}

    def _drive(self, name, *flags, env=None, ok=True):
        out = os.path.join(self.dir.name, name)
        run = subprocess.run(
            [sys.executable, DRIVER, "--input", self.records, "--output", out,
             "--shards", "2", "--threads", "1", *flags],
            env={**os.environ, "SPECDEC_BIN": BINARY, **(env or {})},
            capture_output=True, text=True, timeout=300)
        log = f"driver exited {run.returncode}:\n{run.stderr[-6000:]}"
        self.assertEqual(run.returncode == 0, ok, log)
        return out, run

    def _assert_complete(self, out):
        ids = [r["id"] for r in _lines(out)]
        self.assertEqual(ids, self.ids)  # every id exactly once, in input order
        self.assertEqual(self._rows(out), self.expected)

    def test_two_shards_match_unsharded(self):
        pools = os.path.join(self.dir.name, "pools")
        out, _ = self._drive("sharded.jsonl", "--pools", pools, *FLAGS)
        self._assert_complete(out)
        for i in range(2):
            self.assertTrue(os.listdir(os.path.join(pools, f"shard-{i}")))
            roles = [r["role"] for r in _lines(os.path.join(out + ".parts", f"shard-{i}.jsonl"))]
            self.assertEqual(roles, sorted(roles, key=lambda role: role != "warmup"))

    def test_two_shards_share_pools_through_redis(self):
        redis = shutil.which("redis-server")
        if redis is None:
            if os.environ.get("SPECDEC_REQUIRE_REDIS") == "1":
                raise AssertionError("SPECDEC_REQUIRE_REDIS=1 but redis-server is not on the PATH")
            self.skipTest("redis-server is not on the PATH")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([redis, "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        self.addCleanup(server.wait)
        self.addCleanup(server.terminate)
        cli = ["redis-cli", "-p", str(port)]
        for _ in range(100):
            if subprocess.run([*cli, "ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        out, _ = self._drive("shared.jsonl", "--shared-state", f"redis://127.0.0.1:{port}/0",
                             *FLAGS)
        self._assert_complete(out)
        # Every record taught its group's pool, and both shards published to one stream.
        keys = subprocess.run([*cli, "--scan", "--pattern", "specdec:*:learned"],
                              capture_output=True, text=True, check=True).stdout.split()
        self.assertEqual(len(keys), 1, keys)
        xlen = subprocess.run([*cli, "xlen", keys[0]], capture_output=True, text=True, check=True)
        self.assertEqual(int(xlen.stdout), len(self.ids))

    def test_killed_worker_is_retried(self):
        marker = os.path.join(self.dir.name, "killed.json")
        # Shard 0's target phase kills its own Ray worker after 2 new lines; --concurrency 1
        # makes the lines come one at a time, so the kill lands with targets left to do.
        out, _ = self._drive("killed.jsonl", "--concurrency", "1", *FLAGS,
                             env={knowledge.TEST_KILL_ENV: f"0:2:{marker}"})
        with open(marker) as f:
            killed = json.load(f)
        part = os.path.join(out + ".parts", "shard-0.jsonl")
        self.assertGreater(len(_lines(part)), killed["lines"], "the kill came too late")
        with open(os.path.join(out + ".parts", "shard-0.log")) as f:
            attempts = f.read().split("== shard 0 targets: attempt")[1:]
        self.assertEqual(len(attempts), 2)
        # The binary died with its worker (SIGKILL), rather than outliving it to wind down
        # (which Ray's own SIGTERM of orphans would make it do) while holding the output lock.
        self.assertNotIn("records done", attempts[0])
        self.assertFalse(_alive(killed["child_pid"]), "the dead worker's binary outlived it")
        self._assert_complete(out)

    def test_failed_exit_retried_unless_bad_input(self):
        once = os.path.join(self.dir.name, "failed-once")
        flaky = os.path.join(self.dir.name, "flaky.sh")
        with open(flaky, "w") as f:
            f.write(f'#!/bin/sh\n[ -e "{once}" ] || {{ touch "{once}"; exit 1; }}\n'
                    f'exec "{BINARY}" "$@"\n')
        os.chmod(flaky, os.stat(flaky).st_mode | stat.S_IXUSR)
        out, _ = self._drive("flaky.jsonl", "--specdec", flaky, *FLAGS)
        self.assertTrue(os.path.exists(once))
        self._assert_complete(out)
        # Exit 2 (here clap's usage error) is not retried: one attempt, its stderr reported.
        out, run = self._drive("bad.jsonl", "--no-such-flag", ok=False)
        self.assertIn("unexpected argument '--no-such-flag'", run.stderr)
        with open(os.path.join(out + ".parts", "shard-0.log")) as f:
            self.assertEqual(f.read().count("attempt"), 1)


if __name__ == "__main__":
    unittest.main()
