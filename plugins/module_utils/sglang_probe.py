"""Ask the installed SGLang what it resolves, without a GPU: the program `sglang_resolve` runs.

This file and its parts (PARTS) are a standalone program for the ml-env's own Python (standard
library plus the installed sglang); the module sends their sources to that interpreter on
stdin (BOOTSTRAP). It never touches a GPU, also beside a serving server on a GPU host: torch's
device queries and `nvidia-smi` answer from a description of the GPUs, and a package whose
import needs the absent NVIDIA driver is an inert module the report names (sglang_probe_gpus).

SGLang's own parser reads the release's `--config` file (`prepare_server_args`), then its own
resolution runs (`ServerArgs.resolve_once()` where it exists, else the dataclass's
`__post_init__` already ran it). Each value SGLang changed from what was asked names the file,
line and function that changed it (sglang_probe_trace); an exception SGLang raises is returned
with its own type, message, file and line (sglang_probe_messages); the weights its loader would
load are counted (sglang_probe_weights). Output: one JSON document on the file descriptor given
in the input (stdout is handed to SGLang's logging, which writes there).
"""

import json
import os
import shutil
import sys
import tempfile
import time

try:
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_probe_gpus import (
        DriverlessFinder, Gpus, describe_torch, driver_present, install_fake_nvidia_smi)
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_probe_messages import (
        LogCapture, error_report, keep_parser_errors, known_flags, unknown_flags)
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_probe_trace import (
        RandomDraws, Tracer, changes, fallback_site, resolved_record, trace_record)
    from ansible_collections.sglang.deploy.plugins.module_utils.sglang_probe_weights import (
        checkpoint_weights)
except ImportError:  # in the ml-env's Python: BOOTSTRAP made each part the module of its name
    from sglang_probe_gpus import (  # type: ignore[no-redef]
        DriverlessFinder, Gpus, describe_torch, driver_present, install_fake_nvidia_smi)
    from sglang_probe_messages import (  # type: ignore[no-redef]
        LogCapture, error_report, keep_parser_errors, known_flags, unknown_flags)
    from sglang_probe_trace import (  # type: ignore[no-redef]
        RandomDraws, Tracer, changes, fallback_site, resolved_record, trace_record)
    from sglang_probe_weights import checkpoint_weights  # type: ignore[no-redef]

# The program's files, each the module of its name in the ml-env's Python, in the order
# BOOTSTRAP makes them (a part after those it imports): this file, which imports the others, last.
PARTS = ("sglang_probe_gpus", "sglang_probe_messages", "sglang_probe_trace",
         "sglang_probe_weights", "sglang_probe")


def installed_versions():
    """{name: version} of every distribution in the env: what an upgrade plan compares."""
    from importlib import metadata

    out = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
        except Exception:  # a broken dist-info: skipped, it says nothing usable
            continue
        if name:
            out[str(name)] = str(dist.version)
    return out


def _config_path(request, workdir):
    """The release's config file, or one written from the request's text."""
    config = request.get("config_path")
    if not config:
        config = os.path.join(workdir, "config.yaml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(request.get("config_text") or "")
    return config


def _failed_stage(stage, tracer):
    """Where SGLang raised: before 0.5.19 resolution runs while prepare_server_args builds
    the record, so a raise in "parse" after the record was traced is a resolution error."""
    if stage == "parse" and tracer is not None and tracer.asked is not None:
        return "resolve"
    return stage


class Steps:
    """Where a probe is: the stage SGLang raises in, the tracer once sglang is imported, and
    the seconds each step took (report["phases_s"], for bench_resolve)."""

    def __init__(self, report):
        self.stage, self.tracer = "import", None
        self.phases = report["phases_s"] = {}
        self.mark = time.monotonic()

    def done(self, name):
        now = time.monotonic()
        self.phases[name] = round(now - self.mark, 2)
        self.mark = now


def _import_sglang(report, gpus, steps):
    """torch, its device queries answered from the description, then SGLang's server_args
    module (returned); the installed versions on the way, the tracer on `steps`."""
    report["packages"] = installed_versions()
    steps.done("packages")
    import torch

    describe_torch(torch, gpus)
    from importlib import metadata

    report["sglang_version"] = metadata.version("sglang")
    report["torch"] = {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None)}
    import sglang

    site = os.path.dirname(os.path.dirname(os.path.abspath(sglang.__file__)))
    steps.tracer = Tracer(site)
    from sglang.srt import server_args as sa

    steps.done("import")
    return sa


def _resolve(report, sa, config, argv, steps):
    """SGLang's parser on `argv`, then its resolution, traced: what it changed, where, and the
    weights its loader would load for the result."""
    tracer = steps.tracer
    draws = RandomDraws(tracer)
    start_tracing = trace_record(sa.ServerArgs, tracer)
    flags = known_flags(sa)
    report["known_flags"] = len(flags)
    report["unknown_flags"] = unknown_flags(config, flags)
    steps.stage = "parse"
    # 0.5.19+ parse into an unresolved record and resolve in resolve_once(); earlier
    # releases resolve inside the record's __post_init__, while it is built.
    staged = hasattr(sa.ServerArgs, "resolve_once")
    report["entry"] = "ServerArgs.resolve_once" if staged else "ServerArgs.__post_init__"
    with draws:
        args = sa.prepare_server_args(argv)
    steps.done("parse")
    steps.stage = "resolve"
    if staged:
        start_tracing(args)  # what was asked is the parsed record
        with draws:
            args.resolve_once()
    resolved = resolved_record(args)
    asked = tracer.asked if tracer.asked is not None else {}
    report["asked"], report["resolved"] = asked, resolved
    report["changes"] = changes(asked, resolved, tracer.events,
                                fallback_site(type(args), tracer))
    report["volatile"] = draws.fields(report["changes"])
    steps.done("resolve")
    report["weights"] = checkpoint_weights(args, tracer)
    steps.done("weights")


def probe(request, out):
    """SGLang's answer to `request` (the GPUs, the config), without a GPU: the report, as
    JSON on `out`."""
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="sglang-resolve-")
    gpus = Gpus(request.get("gpus") or {})
    report = {"sglang_version": None, "entry": None, "resolved": None, "asked": None,
              "changes": [], "error": None, "unknown_flags": [], "known_flags": 0,
              "stubbed": {}, "driver": None, "gpus": vars(gpus).copy(), "python": sys.executable,
              "uid": os.getuid()}
    report["gpus"]["capability"] = list(gpus.capability)

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    # torch.compile decorators SGLang applies while its modules import (0.5.23: moe_runner's
    # deep_gemm, reached through model_config from the resolution) build TorchInductor, about
    # 4 s of imports, for kernels a resolution never runs; with this torch returns the function
    # as it is (torch/_dynamo/eval_frame.py, _optimize). No rule of the resolution reads it
    # (tests/integration: the same answer with it "0"); a release's env may still set it.
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    install_fake_nvidia_smi(gpus, workdir)
    report["driver"] = driver_present()
    finder = DriverlessFinder()
    if not report["driver"]:
        sys.meta_path.insert(0, finder)
    config = _config_path(request, workdir)
    argv = ["--config", config] + list(request.get("extra_argv") or [])
    steps = Steps(report)
    log = LogCapture(lambda: steps.tracer)
    parser_errors = keep_parser_errors()
    try:
        _resolve(report, _import_sglang(report, gpus, steps), config, argv, steps)
    except BaseException as exc:  # SGLang's own verdict, whatever it raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        report["error"] = error_report(exc, steps.tracer or Tracer(None), parser_errors)
        report["error"]["stage"] = _failed_stage(steps.stage, steps.tracer)
    report["stubbed"] = finder.stubbed
    report["log"] = log.records
    report["elapsed_s"] = round(time.monotonic() - started, 2)
    shutil.rmtree(workdir, ignore_errors=True)  # the config text and the fake nvidia-smi
    out.write(json.dumps(report, default=repr))
    out.flush()


def run(request):
    # SGLang logs to stdout and stderr: the report goes to a descriptor of its own.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    probe(request, out)
    # The report is out and flushed; tearing down the ~6,000 modules SGLang imported would
    # cost seconds more and say nothing (no server, no child, nothing to clean up).
    sys.stderr.flush()
    os._exit(0)


# How the module starts this program in the ml-env's Python (no file to place on the host,
# also inside a sandbox's private /tmp): the request on stdin's first line, then
# [[name, source], ...] of the PARTS in their order; each part becomes the module of its name
# (sys.modules), then this one runs.
BOOTSTRAP = ("import json, sys, types\n"
             "request = json.loads(sys.stdin.readline())\n"
             "for name, source in json.loads(sys.stdin.read()):\n"
             "    part = sys.modules[name] = types.ModuleType(name)\n"
             "    part.__file__ = '<%s>' % name\n"
             "    exec(compile(source, part.__file__, 'exec'), part.__dict__)\n"
             "sys.modules['sglang_probe'].run(request)\n")


if __name__ == "__main__":
    run(json.loads(sys.stdin.readline() or "{}"))
