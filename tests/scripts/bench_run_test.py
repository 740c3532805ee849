#!/usr/bin/env python3
"""bench/run.py, the peers' benchmark: its peer set agrees with the workers'
(bench/peers/torch_bench.py, tf_bench.py), --configs accepts the table's names and refuses
unknown ones with one line (bench/memory's too), the strongest peer and campo's best against
it are found and reported (JSON, table), and a configuration that cannot run has a row
saying why. An end-to-end run drives stand-in workers (bench_run_fake_peer.py,
bench_run_fake_campo.py) through the real lockstep orchestration, so none of this needs
PyTorch, TensorFlow or a campo build.

With PEERS_PY set (a python with torch and torchvision: bash bench/setup-peers), the real
PyTorch worker also starts and runs one step in every configuration on LeNet; without it
that test is skipped, saying so. Registered with ctest (bench_run_py) in CMakeLists.txt:
  python3 tests/scripts/bench_run_test.py
"""
import contextlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH / "peers"))
sys.path.insert(0, str(BENCH))
import run  # noqa: E402
import tf_bench  # noqa: E402  (the workers import their framework only once started)
import torch_bench  # noqa: E402

BEST_PEER = "pytorch compile+autocast channels_last"  # the stand-in workers' rates
FP16 = "pytorch autocast fp16 channels_last"


def result_of(configs, failed=None):
    """A bench_model result with the given samples/s per configuration and repetition."""
    return {"model": "resnet50", "campo_model": "resnet50", "image_size": 32, "channels": 3,
            "batch": 32, "steps": 2, "repeats": 3, "load_before": (0.5, 0, 0),
            "load_after": (0.7, 0, 0), "failed": dict(failed or {}),
            "configs": {k: {"samples_per_sec": v, "median": sorted(v)[len(v) // 2],
                            "min": min(v), "max": max(v)} for k, v in configs.items()}}


class PeerSetTest(unittest.TestCase):
    def test_run_offers_exactly_the_workers_configurations(self):
        self.assertEqual(set(run.PEER_CONFIGS["pytorch"][1]), set(torch_bench.CONFIGS))
        self.assertEqual(set(run.PEER_CONFIGS["tensorflow"][1]), set(tf_bench.CONFIGS))
        self.assertEqual(run.PEER_CONFIGS["pytorch"][0], "torch_bench.py")
        self.assertEqual(run.PEER_CONFIGS["tensorflow"][0], "tf_bench.py")

    def test_precisions_are_the_workers(self):
        precision = {None: "fp32", "bfloat16": "bf16", "float16": "fp16"}
        for name, config in torch_bench.CONFIGS.items():
            self.assertEqual(run.PEER_CONFIGS["pytorch"][1][name], precision[config.autocast],
                             name)
        self.assertEqual(run.peer_precision("pytorch compile channels_last"), "fp32")
        self.assertEqual(run.peer_precision("tensorflow mixed-bfloat16"), "bf16")

    def test_the_strong_pytorch_configurations_are_offered(self):
        c = torch_bench.CONFIGS
        for layout in (False, True):
            for autocast in (None, "bfloat16"):
                self.assertTrue(any(not x.compiled and x.channels_last == layout and
                                    x.autocast == autocast for x in c.values()),
                                f"eager {autocast} channels_last={layout}")
        for autocast in (None, "bfloat16"):
            self.assertTrue(any(x.compiled and x.channels_last and x.autocast == autocast
                                for x in c.values()), f"compile {autocast} channels_last")
        self.assertEqual(c["compile+autocast channels_last"].autocast, "bfloat16")
        self.assertEqual(c["autocast fp16 channels_last"].autocast, "float16")
        # The names say what they run.
        for name, x in c.items():
            self.assertEqual("channels_last" in name, x.channels_last, name)
            self.assertEqual(name.startswith("compile"), x.compiled, name)


class ParseConfigsTest(unittest.TestCase):
    def test_a_framework_means_all_its_configurations_in_order(self):
        self.assertEqual(run.parse_configs("tensorflow,campo"),
                         ["campo", "tensorflow:fp32", "tensorflow:grappler-amp",
                          "tensorflow:mixed-bfloat16"])
        self.assertEqual(run.parse_configs("pytorch"),
                         [f"pytorch:{c}" for c in run.PEER_CONFIGS["pytorch"][1]])

    def test_the_tables_name_and_the_colon_form_are_one_configuration(self):
        self.assertEqual(run.parse_configs("pytorch fp32 channels_last"),
                         ["pytorch:fp32 channels_last"])
        self.assertEqual(run.parse_configs("pytorch:fp32 channels_last, pytorch  fp32   "
                                           "channels_last,,pytorch:fp32"),
                         ["pytorch:fp32", "pytorch:fp32 channels_last"])
        self.assertEqual(run.parse_configs("pytorch:compile+autocast channels_last"),
                         ["pytorch:compile+autocast channels_last"])

    def test_unknown_names_are_refused_with_one_line(self):
        for entry in ("pytorch:bf16", "pytorch:channels_last", "torch:fp32", "mxnet",
                      "pytorch autocast bf16", "campo:fp32", "tensorflow:amp"):
            with self.assertRaises(ValueError, msg=entry) as e:
                run.parse_configs(f"campo,{entry}")
            message = str(e.exception)
            self.assertNotIn("\n", message)
            self.assertIn(f"unknown configuration '{entry}' in --configs", message)
            self.assertIn("pytorch:compile+autocast channels_last", message)  # the known ones

    def test_a_near_miss_gets_a_hint(self):
        with self.assertRaises(ValueError) as e:
            run.parse_configs("pytorch:fp32 channel_last")
        self.assertIn("did you mean 'pytorch:fp32 channels_last'?", str(e.exception))
        with self.assertRaises(ValueError) as e:
            run.parse_configs("pytorch:nope", option="--peers")
        self.assertNotIn("did you mean", str(e.exception))
        self.assertIn("in --peers", str(e.exception))

    def test_an_empty_selection_is_refused(self):
        for text in ("", ",", " , "):
            with self.assertRaises(ValueError) as e:
                run.parse_configs(text)
            self.assertEqual(str(e.exception), "--configs selects no configuration")


def one_line_error(argv, prefix):
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = out.stderr.strip().splitlines()
    return out.returncode, lines, out.stdout


class CommandLineTest(unittest.TestCase):
    def check_refused(self, argv, prefix, words):
        code, lines, stdout = one_line_error([sys.executable, *argv], prefix)
        self.assertEqual(code, 1, lines)
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith(prefix), lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(stdout, "")

    def test_bench_run_refuses_an_unknown_configuration(self):
        self.check_refused(["bench/run.py", "--configs", "campo,pytorch:fp16"],
                           "bench/run: error: unknown configuration 'pytorch:fp16'", [])
        self.check_refused(["bench/run.py", "--configs", ","],
                           "bench/run: error: --configs selects no configuration", [])

    def test_bench_run_refuses_an_unknown_model(self):
        self.check_refused(["bench/run.py", "--models", "bert", "--configs", "pytorch"],
                           "bench/run: error: unknown model 'bert'", [])

    def test_bench_memory_refuses_an_unknown_configuration(self):
        self.check_refused(["bench/memory.py", "--configs", "pytorch:channels_last"],
                           "bench/memory: error: unknown configuration "
                           "'pytorch:channels_last'", [])

    def test_the_pytorch_worker_refuses_an_unknown_configuration(self):
        common = ["bench/peers/torch_bench.py", "--model", "lenet", "--image-size", "28",
                  "--channels", "1", "--batch", "2", "--steps", "1", "--threads", "1"]
        self.check_refused([*common, "--config", "channels_last"], "peer-bench: error: ",
                           ["--config", "channels_last"])
        self.check_refused([*common, "--config", "compile+autocast channels_last",
                            "--warmup", "0"],
                           "peer-bench: error: --config 'compile+autocast channels_last' "
                           "needs --warmup >= 1", [])


class StrongestPeerTest(unittest.TestCase):
    def test_the_strongest_peer_and_campos_best_against_it(self):
        r = result_of({"campo fp32": [90, 100, 110], "campo cost-aware": [300, 330, 310],
                       "pytorch fp32": [50, 50, 50], "pytorch compile channels_last": [80, 80, 80],
                       "pytorch autocast channels_last": [150, 160, 140],
                       "tensorflow fp32": [60, 60, 60],
                       "tensorflow grappler-amp": [100, 110, 100]},
                      failed={FP16: "exited with status 1; peer-bench: error: no float16",
                              "pytorch compile": "repetition 2: no answer within 900 s"})
        run.add_ratios(r)
        self.assertEqual(r["best_peer"], "pytorch autocast channels_last")
        self.assertEqual(r["best_peer_median"], 150)
        self.assertEqual(r["best_peer_per_framework"],
                         {"pytorch": "pytorch autocast channels_last",
                          "tensorflow": "tensorflow grappler-amp"})
        self.assertEqual(r["best_campo"], "campo cost-aware")
        # Paired by repetition: 300/150, 330/160, 310/140 -> median 2.0625.
        self.assertAlmostEqual(r["campo_best_x_best_peer"], 330 / 160)
        self.assertAlmostEqual(r["configs"]["pytorch autocast channels_last"]["x_best_peer"], 1)
        # The strongest fp32 peer is a compiled channels_last one, not only "... fp32" names.
        self.assertEqual(r["best_peer_fp32"], "pytorch compile channels_last")
        self.assertAlmostEqual(r["campo_fp32_x_best_peer_fp32"], 100 / 80)
        self.assertAlmostEqual(r["cost_aware_x_tf_amp"], 3.0)
        self.assertEqual(r["peers_not_measured"], [FP16, "pytorch compile"])

        table = run.markdown([r], "header")
        self.assertIn("| pytorch autocast channels_last (best peer) | 150.0 (140.0-160.0) "
                      "| x1.00 |", table)
        self.assertIn("| campo cost-aware (campo best) | 310.0", table)
        self.assertIn(f"| {FP16} | not measured: exited with status 1; peer-bench: error: no "
                      f"float16 |", table)
        self.assertIn("| resnet50 | pytorch autocast channels_last (150.0) | campo cost-aware "
                      "(310.0) | x2.06 | x1.25 (pytorch compile channels_last) | x3.00 | "
                      f"{FP16}, pytorch compile | 0.5-0.7 |", table)

    def test_peers_alone_still_name_the_strongest(self):
        r = result_of({"pytorch fp32": [10, 10, 10], "tensorflow fp32": [20, 21, 19]})
        run.add_ratios(r)
        self.assertEqual(r["best_peer"], "tensorflow fp32")
        self.assertNotIn("best_campo", r)
        self.assertEqual(r["peers_not_measured"], [])
        self.assertIn("| resnet50 | tensorflow fp32 (20.0) | n/a | n/a | n/a | n/a | none |",
                      run.markdown([r], "header"))

    def test_no_peer_measured_says_so(self):
        r = result_of({"campo fp32": [1, 1, 1]}, failed={"pytorch fp32": "not started"})
        run.add_ratios(r)
        self.assertNotIn("best_peer", r)
        self.assertIn("| resnet50 | n/a | n/a | n/a | n/a | n/a | pytorch fp32 |",
                      run.markdown([r], "header"))


class FakeWorkersTest(unittest.TestCase):
    """bench/run.py's whole run (start, warm-up round, interleaved repetitions, JSON,
    table) with stand-in workers for every configuration."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="bench_run_test_"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        peers = self.tmp / "peers"
        peers.mkdir()
        for script in ("torch_bench.py", "tf_bench.py"):
            shutil.copy(HERE / "bench_run_fake_peer.py", peers / script)
        campo = self.tmp / "campo"
        campo.write_text(f"#!/bin/sh\nexec '{sys.executable}' "
                         f"'{HERE / 'bench_run_fake_campo.py'}' \"$@\"\n")
        campo.chmod(campo.stat().st_mode | stat.S_IXUSR)
        self.campo = campo
        old_dir, old_env = run.PEERS_DIR, os.environ.get("BENCH_RUN_TEST_BENCH_DIR")
        run.PEERS_DIR = peers
        os.environ["BENCH_RUN_TEST_BENCH_DIR"] = str(BENCH)

        def restore():
            run.PEERS_DIR = old_dir
            if old_env is None:
                os.environ.pop("BENCH_RUN_TEST_BENCH_DIR", None)
            else:
                os.environ["BENCH_RUN_TEST_BENCH_DIR"] = old_env
        self.addCleanup(restore)

    def bench_run(self, *argv):
        out = self.tmp / "out"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            run.main(["--models", "lenet", "--repeats", "2", "--steps", "1", "--warmup", "1",
                      "--threads", "1", "--min-free-mib", "0", "--setup-timeout", "60",
                      "--run-timeout", "60", "--campo", str(self.campo), "--out", str(out),
                      *argv])
        return out, printed.getvalue()

    def test_every_configuration_runs_and_the_strongest_peer_is_named(self):
        out, printed = self.bench_run()
        [r] = json.loads((out / "results.json").read_text())
        peers = [f"{fw} {c}" for fw, (_, cs) in run.PEER_CONFIGS.items() for c in cs]
        measured = set(peers) - {FP16} | {f"campo {p}" for p in run.CAMPO_POLICIES}
        self.assertEqual(set(r["configs"]), measured)
        for v in r["configs"].values():
            self.assertEqual(len(v["samples_per_sec"]), 2)
        # The fp16 stand-in refuses to start: a row saying why, no number, nothing silent.
        self.assertEqual(list(r["failed"]), [FP16])
        self.assertIn("does not run float16", r["failed"][FP16])
        self.assertEqual(r["peers_not_measured"], [FP16])
        self.assertEqual(r["best_peer"], BEST_PEER)
        self.assertEqual(r["best_peer_per_framework"],
                         {"pytorch": BEST_PEER, "tensorflow": "tensorflow mixed-bfloat16"})
        self.assertEqual(r["best_peer_fp32"], "pytorch compile channels_last")
        self.assertEqual(r["best_campo"], "campo cost-aware")
        # 750 samples/s against about 500 (the stand-in sleeps a little longer than asked).
        self.assertGreater(r["campo_best_x_best_peer"], 1.3)
        self.assertLess(r["campo_best_x_best_peer"], 2.0)
        self.assertEqual(r["configs"]["campo amp"]["campo"]["casts"], 7)
        table = (out / "results.md").read_text()
        self.assertIn(f"| {BEST_PEER} (best peer) |", table)
        self.assertIn(f"| {FP16} | not measured: exited with status 1; peer-bench: error: "
                      f"autocast fp16 channels_last: torch 0.0-fake's CPU autocast does not run "
                      f"float16", table)
        self.assertIn(f"| lenet | {BEST_PEER} (", table)
        self.assertIn(table, printed)
        for name in peers:
            self.assertTrue((out / "logs" / f"lenet-{name.replace(' ', '-')}.log").exists(), name)
        try:
            import matplotlib  # noqa: F401
            self.assertTrue((out / "throughput.png").exists())
        except ImportError:
            self.assertIn("bench/run: no charts: this python has no matplotlib", printed)
            self.assertFalse((out / "throughput.png").exists())

    def test_a_selection_runs_only_what_it_names(self):
        out, _ = self.bench_run("--configs", "pytorch fp32,pytorch:fp32 channels_last")
        [r] = json.loads((out / "results.json").read_text())
        self.assertEqual(set(r["configs"]), {"pytorch fp32", "pytorch fp32 channels_last"})
        self.assertEqual(r["failed"], {})
        self.assertEqual(r["best_peer"], "pytorch fp32 channels_last")


class RealPyTorchWorkerTest(unittest.TestCase):
    """Every configuration of the real torch_bench.py starts and runs a step on LeNet (the
    compiled ones compile it first: a minute or two on two cores)."""

    def test_every_configuration(self):
        python = os.environ.get("PEERS_PY")
        if not python:
            self.skipTest("PEERS_PY is not set (a python with torch and torchvision: bash "
                          "bench/setup-peers, then PEERS_PY=~/.cache/campo/peers/bin/python)")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        for config in torch_bench.CONFIGS:
            with self.subTest(config=config):
                argv = [python, str(BENCH / "peers" / "torch_bench.py"), "--model", "lenet",
                        "--image-size", "28", "--channels", "1", "--batch", "8", "--steps",
                        "1", "--warmup", "1", "--threads", "1", "--config", config]
                p = subprocess.run(argv, input="run\nquit\n", capture_output=True, text=True,
                                   env=env, timeout=600)
                errors = [l for l in p.stderr.splitlines() if l.startswith("peer-bench: error")]
                if config == "autocast fp16 channels_last" and p.returncode != 0:
                    # Refused where this torch cannot train fp16 on the CPU: one line, why.
                    self.assertEqual(len(errors), 1, p.stderr)
                    self.assertTrue("float16" in errors[0] or "GradScaler" in errors[0],
                                    errors[0])
                    continue
                self.assertEqual(p.returncode, 0, p.stderr[-2000:])
                ready, answer = [json.loads(l) for l in p.stdout.splitlines()]
                self.assertEqual(ready["config"], config)
                notes = ready["notes"]
                layout = ("channels_last (inputs and 4-D parameters checked)"
                          if torch_bench.CONFIGS[config].channels_last else "NCHW")
                self.assertIn(layout, notes)
                if torch_bench.CONFIGS[config].compiled:
                    self.assertIn("torch.compile", notes)
                if config == "autocast fp16 channels_last":
                    self.assertIn("GradScaler('cpu')", notes)
                self.assertGreater(answer["samples_per_sec"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
